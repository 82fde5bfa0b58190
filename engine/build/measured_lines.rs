//! What the JSON lines of a `gpu-check.sh` run mean to the cost model, read with serde_json:
//! shared by `build.rs`, which turns the runs kept in `src/cost/measured/` into Rust data (the
//! engine has no JSON reader), and `benches/gpu.rs`, which reads a run it just measured.

use serde_json::Value;

/// The first line of a kept run: which run, on which GPU, of which commit.
pub struct Head {
    pub run: String,
    pub gpu: String,
    pub spec: String,
    pub date: String,
    pub commit: String,
}

/// One measured line, as `cost::measured::Row` holds it.
pub struct Line {
    pub bench: String,
    pub name: String,
    pub bytes: u64,
    pub calls: u64,
    pub seconds: f64,
    pub torch_seconds: Option<f64>,
    pub wall_seconds: Option<f64>,
}

/// A run's head and measured lines. Lines that are not objects are skipped, and so are benches
/// the model does not read (`peer`, between two GPUs).
pub fn parse(text: &str) -> Result<(Head, Vec<Line>), String> {
    let mut objects = text
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .map(|l| serde_json::from_str::<Value>(l).map_err(|e| format!("{e} in the line {l}")));
    let head = objects.next().ok_or("no lines")??;
    let field = |k: &str| {
        head[k]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("the first line has no \"{k}\""))
    };
    let head = Head {
        run: field("run")?,
        gpu: field("gpu")?,
        spec: field("spec")?,
        date: field("date")?,
        commit: field("commit")?,
    };
    let mut lines = Vec::new();
    for object in objects {
        let object = object?;
        let number = |k: &str| object[k].as_f64();
        let Some(bench) = object["bench"].as_str() else {
            continue;
        };
        let (name, ms) = match bench {
            "transfer" | "non_blocking" => (object["kind"].as_str(), number("event_ms")),
            "op" | "profile" => (object["name"].as_str(), number("ms")),
            _ => continue,
        };
        let (Some(name), Some(ms)) = (name, ms) else {
            return Err(format!("a {bench} line without its name or time: {object}"));
        };
        lines.push(Line {
            bench: bench.to_string(),
            name: name.to_string(),
            bytes: number("bytes").unwrap_or(0.0) as u64,
            calls: number("calls").unwrap_or(1.0) as u64,
            seconds: ms / 1e3,
            torch_seconds: number("torch_ms")
                .or(number("torch_event_ms"))
                .map(|t| t / 1e3),
            wall_seconds: number("wall_ms").or(number("call_ms")).map(|t| t / 1e3),
        });
    }
    Ok((head, lines))
}
