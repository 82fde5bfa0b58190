//! The REPL's latency targets, measured through the same `Session` the REPL uses, beside plain
//! evcxr in the same run (no dependency; placelab's `evcxr.toml` less `variable_types`, so dylib
//! mode and cells at opt 0, and rust-analyzer for variables' types): evcxr start, the first
//! cell's result, the first completion (which loads rust-analyzer), a trivial cell, a cell with
//! no value, and the magics that compile nothing; and the memory each holds after its first cell
//! (this process and its cell process), with rust-analyzer loaded and let go. `cargo bench
//! --bench session` (the first run compiles the engine: minutes); `-- placelab` or `-- plain`
//! runs one side only, which is how `benches/class-footprint.sh` measures each side's memory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use placelab_frontend::{cell, cell_output, session, setup};

/// The median time of `n` runs of `cell`.
fn median_of(n: usize, mut cell: impl FnMut()) -> Duration {
    let mut v: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            cell();
            t.elapsed()
        })
        .collect();
    v.sort();
    v[n / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// Resident memory of this process and of its children (the cell process, and rust-analyzer's
/// while it runs), in MiB.
fn rss_mib() -> (f64, f64) {
    let rss = |pid: &str| -> f64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("VmRSS:"))?.to_owned();
                line.split_whitespace().nth(1)?.parse::<f64>().ok()
            })
            .unwrap_or(0.0)
            / 1024.0
    };
    let me = std::process::id().to_string();
    let children: f64 = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().into_owned();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .to_owned();
            (ppid == me).then(|| rss(&pid))
        })
        .sum();
    (rss(&me), children)
}

fn print_memory(who: &str) {
    let (own, cells) = rss_mib();
    println!(
        "{who}: RSS {:.0} MiB (this process {own:.0} MiB + its children, the cell process and rust-analyzer's, {cells:.0} MiB)",
        own + cells
    );
}

fn main() {
    // This binary is also evcxr's cell runner and rustc wrapper.
    setup::hooks();
    let only = std::env::args()
        .skip(1)
        .find(|a| a == "placelab" || a == "plain");
    match only.as_deref() {
        Some("placelab") => placelab_side(),
        Some("plain") => plain_side(),
        _ => {
            placelab_side();
            // Plain evcxr in a process of its own: its own evcxr.toml, its own memory.
            let me = std::env::current_exe().expect("this bench's path");
            let ok = std::process::Command::new(me).arg("plain").status();
            assert!(ok.is_ok_and(|s| s.success()), "the plain evcxr side failed");
        }
    }
}

fn placelab_side() {
    let prepared = session::prepare("bench").expect("a compile directory");
    let quiet: cell_output::Sink = Arc::new(|_, _| {});
    let t = Instant::now();
    let started = t;
    let mut s = session::Session::start(prepared, quiet.clone()).expect("the session starts");
    println!(
        "placelab: session start (evcxr + engine preload, warm) {}",
        ms(t.elapsed())
    );
    // As the kernel does when a notebook's first cell is already waiting: that cell first, the
    // rust-analyzer warm-up after it.
    let t = Instant::now();
    let r = cell::execute(
        &mut s,
        "let x = Tensor::randn([1000, 1000], &Device::Cpu)?;\nx.shape().to_vec()",
    );
    assert!(r.ok(), "{r:?}");
    println!("placelab: first cell result {}", ms(t.elapsed()));
    println!(
        "placelab: start to first result (a cell sent at once) {}",
        ms(started.elapsed())
    );
    print_memory("placelab: after the first cell,");
    // rust-analyzer is loaded by the first completion only (cells take their variables' types
    // from rustc), and let go after a quiet spell.
    let t = Instant::now();
    let (_, _, names) = s.completions("x.sha", 5);
    assert!(names.iter().any(|n| n == "shape"), "{names:?}");
    println!(
        "placelab: first completion (loads rust-analyzer) {}",
        ms(t.elapsed())
    );
    print_memory("placelab: rust-analyzer loaded,");
    s.release_analyzer();
    print_memory("placelab: rust-analyzer let go,");
    // Loaded and let go again, as a learner who pauses between completions makes it: what the
    // kernel keeps after each time.
    for round in 2..=5 {
        let t = Instant::now();
        let _ = s.completions("x.sha", 5);
        let took = t.elapsed();
        s.release_analyzer();
        let (own, cells) = rss_mib();
        println!(
            "placelab: completion {round} (loads rust-analyzer again) {}, then let go: RSS {:.0} MiB",
            ms(took),
            own + cells
        );
    }
    let trivial = median_of(15, || {
        assert!(cell::execute(&mut s, "x.shape().to_vec()").ok());
    });
    println!(
        "placelab: trivial cell `x.shape()` median of 15: {}",
        ms(trivial)
    );
    let statement = median_of(15, || {
        assert!(cell::execute(&mut s, "x.shape();").ok());
    });
    println!(
        "placelab: statement cell `x.shape();` (no value) median of 15: {}",
        ms(statement)
    );
    // A new variable: its type comes from the run, so the cell compiles once.
    let with_let = median_of(15, || {
        assert!(cell::execute(&mut s, "let n = x.shape().len();").ok());
    });
    println!(
        "placelab: cell with a `let` (`let n = x.shape().len();`) median of 15: {}",
        ms(with_let)
    );
    for magic in [":mem", ":transfers", ":empty_cache"] {
        let v = median_of(50, || {
            assert!(cell::execute(&mut s, magic).ok());
        });
        println!("placelab: {magic} median of 50: {}", ms(v));
    }
    let devices = median_of(5, || {
        assert!(cell::execute(&mut s, ":devices").ok());
    });
    println!(
        "placelab: :devices (asks the cell process over the probe) median of 5: {}",
        ms(devices)
    );
    drop(s);
}

/// Plain evcxr: no dependency; placelab's evcxr.toml less `variable_types`, so evcxr's own
/// defaults otherwise (rust-analyzer for variables' types, the toolchain's library sources).
fn plain_side() {
    let root = setup::cache_dir();
    let config = root.join("bench-plain-config");
    std::fs::create_dir_all(&config).expect("the evcxr config");
    std::fs::write(config.join("evcxr.toml"), setup::EVCXR_SETTINGS).expect("the evcxr config");
    // SAFETY: no other thread exists yet (this side runs in a process of its own).
    unsafe {
        std::env::set_var("EVCXR_CONFIG_DIR", config);
        std::env::set_var("EVCXR_TMPDIR", root.join("bench-plain-evcxr"));
    }
    let t = Instant::now();
    let started = t;
    let (mut ctx, _out) = evcxr::CommandContext::new().expect("plain evcxr starts");
    println!("plain evcxr: start {}", ms(t.elapsed()));
    let t = Instant::now();
    ctx.execute("let v = vec![1000usize, 1000];\nv.clone()")
        .expect("a cell");
    println!("plain evcxr: first cell result {}", ms(t.elapsed()));
    println!(
        "plain evcxr: start to first result {}",
        ms(started.elapsed())
    );
    print_memory("plain evcxr: after the first cell,");
    let trivial = median_of(15, || {
        ctx.execute("v.clone()").expect("a cell");
    });
    println!("plain evcxr: trivial cell median of 15: {}", ms(trivial));
    let statement = median_of(15, || {
        ctx.execute("v.len();").expect("a cell");
    });
    println!(
        "plain evcxr: statement cell `v.len();` (no value) median of 15: {}",
        ms(statement)
    );
    let with_let = median_of(15, || {
        ctx.execute("let n = v.len();").expect("a cell");
    });
    println!(
        "plain evcxr: cell with a `let` (`let n = v.len();`) median of 15: {}",
        ms(with_let)
    );
}
