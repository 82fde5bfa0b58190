//! The runs kept in `src/cost/measured/*.jsonl` as Rust data (`OUT_DIR/measured_runs.rs`, which
//! `cost/measured.rs` includes): the engine reads no JSON at run time.

use std::fmt::Write;
use std::path::Path;

use super::measured_lines::{Head, Line, parse};

/// Writes every kept run, oldest first (by date, then name), as one `&[Run]` expression.
pub fn write(measured: &Path, out: &Path) {
    println!("cargo:rerun-if-changed={}", measured.display());
    let mut runs: Vec<(Head, Vec<Line>)> = std::fs::read_dir(measured)
        .expect("src/cost/measured")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        })
        .collect();
    runs.sort_by(|a, b| (&a.0.date, &a.0.run).cmp(&(&b.0.date, &b.0.run)));
    let mut rust = String::from("// Written by build.rs from src/cost/measured/*.jsonl.\n&[\n");
    for (head, lines) in &runs {
        writeln!(
            rust,
            "Run {{ name: Cow::Borrowed({:?}), gpu: Cow::Borrowed({:?}), spec: Cow::Borrowed({:?}), \
             date: Cow::Borrowed({:?}), commit: Cow::Borrowed({:?}), rows: Cow::Borrowed(&[",
            head.run, head.gpu, head.spec, head.date, head.commit
        )
        .unwrap();
        for l in lines {
            writeln!(
                rust,
                "    Row {{ bench: Cow::Borrowed({:?}), name: Cow::Borrowed({:?}), bytes: {}, \
                 calls: {}, seconds: {:?}, torch_seconds: {:?}, wall_seconds: {:?} }},",
                l.bench, l.name, l.bytes, l.calls, l.seconds, l.torch_seconds, l.wall_seconds
            )
            .unwrap();
        }
        rust.push_str("]) },\n");
    }
    rust.push_str("]\n");
    std::fs::write(out.join("measured_runs.rs"), rust).unwrap();
}
