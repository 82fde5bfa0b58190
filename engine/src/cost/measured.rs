//! placelab's own measurements on real GPUs, kept as data: each run is the JSON lines
//! `benches/gpu-check.sh` wrote there (one object a line), after a first line naming the GPU,
//! the date and the commit measured (`benches/keep-run.py` writes such a file from a run). The
//! cost model is fitted on them (`fit.rs`), and a prediction a learner sees on a simulated
//! device can be shown beside what that GPU measured.

/// One run of `gpu-check.sh` on one GPU.
#[derive(Debug, Clone)]
pub struct Run {
    /// `h200-2026-11-26`.
    pub name: String,
    /// As the driver names it: `NVIDIA H200`.
    pub gpu: String,
    /// The key of the GPU in placelab's table (`h200`).
    pub spec: String,
    pub date: String,
    /// The commit of placelab that was measured.
    pub commit: String,
    pub rows: Vec<Row>,
}

/// One measured line: what was measured and how long it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// `transfer`, `non_blocking` (a copy queued from pinned memory), `op` (timed whole, with a
    /// synchronize) or `profile` (one row of a profiled step: CUDA events around each op).
    pub bench: String,
    /// A transfer's `h2d_pinned`, …; an op's or a profile row's name.
    pub name: String,
    /// A transfer's size.
    pub bytes: u64,
    /// A profile row's calls (1 otherwise).
    pub calls: u64,
    /// placelab's time: a copy's CUDA-event time, an op's wall time, a profile row's events.
    pub seconds: f64,
    /// PyTorch's time for the same work in the same run, where it was measured.
    pub torch_seconds: Option<f64>,
    /// A copy's time on the host's clock, from the call to its return: the whole copy for a
    /// blocking one, the queueing alone for a non-blocking one.
    pub wall_seconds: Option<f64>,
}

impl Run {
    /// The op or whole step measured under `name` ("matmul 4096^3 bf16", "pin_memory 64 MiB",
    /// "step 784-128-10 b64", …), where this run has it.
    pub fn op(&self, name: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.bench == "op" && r.name == name)
    }
}

/// The runs kept in the repository, oldest first (parsed once per process).
pub fn runs() -> &'static [Run] {
    static RUNS: std::sync::OnceLock<Vec<Run>> = std::sync::OnceLock::new();
    RUNS.get_or_init(|| {
        [
            include_str!("measured/h200-2026-11-26.jsonl"),
            include_str!("measured/h100-2026-11-27-a.jsonl"),
            include_str!("measured/h100-2026-11-27-b.jsonl"),
            include_str!("measured/h100-2026-11-27-c.jsonl"),
            include_str!("measured/h200-2026-11-28.jsonl"),
            include_str!("measured/h200-2026-11-28-b.jsonl"),
            include_str!("measured/h200-2026-11-28-c.jsonl"),
            include_str!("measured/h200-2026-11-28-d.jsonl"),
            include_str!("measured/h200-2026-11-28-e.jsonl"),
            include_str!("measured/h200-2026-11-28-f.jsonl"),
        ]
        .into_iter()
        .map(|text| parse(text).expect("a kept run parses"))
        .collect()
    })
}

/// The run named `name` (`h200-2026-11-26`).
pub fn run(name: &str) -> Option<&'static Run> {
    runs().iter().find(|r| r.name == name)
}

/// The newest kept run on the GPU with table key `spec`, if any.
pub fn newest_on(spec: &str) -> Option<&'static Run> {
    runs().iter().rev().find(|r| r.spec == spec)
}

/// The transfer of `kind` (`h2d_pinned`, …) measured in `run` nearest in size to `bytes`
/// (nearest on a logarithmic scale).
pub fn nearest_transfer<'a>(run: &'a Run, kind: &str, bytes: u64) -> Option<&'a Row> {
    nearest(run, "transfer", kind, bytes)
}

/// The non-blocking copy from pinned memory (`h2d_pinned`) measured in `run` nearest in size to
/// `bytes`: `wall_seconds` is how long the call took to return, `seconds` the copy itself.
pub fn nearest_non_blocking(run: &Run, bytes: u64) -> Option<&Row> {
    nearest(run, "non_blocking", "h2d_pinned", bytes)
}

fn nearest<'a>(run: &'a Run, bench: &str, kind: &str, bytes: u64) -> Option<&'a Row> {
    let distance = |r: &Row| ((r.bytes.max(1) as f64) / (bytes.max(1) as f64)).ln().abs();
    (run.rows.iter())
        .filter(|r| r.bench == bench && r.name == kind)
        .min_by(|a, b| distance(a).total_cmp(&distance(b)))
}

/// A run from its JSON lines: the first names the run, the rest are `gpu-check.sh`'s lines
/// (`peer` ones, between two GPUs, are kept out).
pub fn parse(text: &str) -> Result<Run, String> {
    let mut lines = text.lines().filter(|l| l.trim_start().starts_with('{'));
    let head = flat_object(lines.next().ok_or("no lines")?)?;
    let field = |k: &str| -> Result<String, String> {
        match head.iter().find(|(key, _)| key == k) {
            Some((_, Value::Text(s))) => Ok(s.clone()),
            _ => Err(format!("the first line has no \"{k}\"")),
        }
    };
    let mut run = Run {
        name: field("run")?,
        gpu: field("gpu")?,
        spec: field("spec")?,
        date: field("date")?,
        commit: field("commit")?,
        rows: Vec::new(),
    };
    for line in lines {
        let object = flat_object(line)?;
        let text = |k: &str| {
            object.iter().find_map(|(key, v)| match v {
                Value::Text(s) if key == k => Some(s.clone()),
                _ => None,
            })
        };
        let number = |k: &str| {
            object.iter().find_map(|(key, v)| match v {
                Value::Number(x) if key == k => Some(*x),
                _ => None,
            })
        };
        let Some(bench) = text("bench") else { continue };
        let (name, ms) = match bench.as_str() {
            "transfer" | "non_blocking" => (text("kind"), number("event_ms")),
            "op" | "profile" => (text("name"), number("ms")),
            _ => continue,
        };
        let (Some(name), Some(ms)) = (name, ms) else {
            return Err(format!("a {bench} line without its name or time: {line}"));
        };
        run.rows.push(Row {
            bench,
            name,
            bytes: number("bytes").unwrap_or(0.0) as u64,
            calls: number("calls").unwrap_or(1.0) as u64,
            seconds: ms / 1e3,
            torch_seconds: number("torch_ms")
                .or(number("torch_event_ms"))
                .map(|t| t / 1e3),
            wall_seconds: number("wall_ms").or(number("call_ms")).map(|t| t / 1e3),
        });
    }
    Ok(run)
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Text(String),
    Number(f64),
    Other,
}

/// The keys and values of a one-line JSON object whose values are strings, numbers, booleans
/// or null (all `gpu-check.sh` writes); nested values are refused.
fn flat_object(line: &str) -> Result<Vec<(String, Value)>, String> {
    let bad = |why: &str| format!("{why} in the measurement line {line}");
    let body = line
        .trim()
        .strip_prefix('{')
        .and_then(|l| l.strip_suffix('}'))
        .ok_or_else(|| bad("not one object"))?;
    let mut chars = body.chars().peekable();
    let mut out = Vec::new();
    let read_string = |chars: &mut std::iter::Peekable<std::str::Chars>| -> Result<String, String> {
        let mut s = String::new();
        loop {
            match chars.next() {
                Some('"') => return Ok(s),
                Some('\\') => match chars.next() {
                    Some('n') => s.push('\n'),
                    Some('t') => s.push('\t'),
                    Some(c) => s.push(c),
                    None => return Err(bad("an unfinished escape")),
                },
                Some(c) => s.push(c),
                None => return Err(bad("an unfinished string")),
            }
        }
    };
    loop {
        while chars.next_if(|c| c.is_whitespace() || *c == ',').is_some() {}
        match chars.next() {
            None => return Ok(out),
            Some('"') => {}
            Some(_) => return Err(bad("a key that is not a string")),
        }
        let key = read_string(&mut chars)?;
        while chars.next_if(|c| c.is_whitespace() || *c == ':').is_some() {}
        let value = if chars.next_if_eq(&'"').is_some() {
            Value::Text(read_string(&mut chars)?)
        } else {
            let mut raw = String::new();
            while let Some(c) = chars.next_if(|c| *c != ',') {
                raw.push(c);
            }
            let raw = raw.trim();
            if raw.starts_with(['{', '[']) {
                return Err(bad("a nested value"));
            }
            raw.parse().map(Value::Number).unwrap_or(Value::Other)
        };
        out.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kept_run_parses_with_its_rows() {
        let runs = runs();
        assert_eq!(runs[0].name, "h200-2026-11-26");
        assert_eq!(runs[0].gpu, "NVIDIA H200");
        for run in runs {
            let transfers = run.rows.iter().filter(|r| r.bench == "transfer").count();
            assert_eq!(transfers, 24, "{}: 4 kinds × 6 sizes", run.name);
            assert!(run.rows.iter().all(|r| r.seconds > 0.0), "{}", run.name);
        }
        let h200 = &runs[0];
        let add = h200.op("add 10M f32").unwrap();
        assert!((add.seconds - 0.066e-3).abs() < 1e-12, "{add:?}");
        assert!(
            (add.torch_seconds.unwrap() - 0.042e-3).abs() < 1e-12,
            "{add:?}"
        );
        // A non-blocking copy keeps the call's time beside the copy's (notebook 03 shows both).
        let queued = nearest_non_blocking(run("h200-2026-11-28-f").unwrap(), 64 << 20).unwrap();
        assert_eq!(queued.bytes, 64 << 20);
        assert!(
            (queued.wall_seconds.unwrap() - 0.00666e-3).abs() < 1e-12,
            "{queued:?}"
        );
        assert!((queued.seconds - 1.21747e-3).abs() < 1e-12, "{queued:?}");
    }

    #[test]
    fn a_line_that_is_not_flat_json_is_refused_with_the_line() {
        let head = r#"{"run":"x","gpu":"g","spec":"h100","date":"d","commit":"c"}"#;
        let nested = format!("{head}\n{{\"bench\":\"op\",\"name\":{{\"a\":1}}}}");
        assert!(parse(&nested).unwrap_err().contains("nested"));
        let no_time = format!("{head}\n{{\"bench\":\"op\",\"name\":\"add\"}}");
        assert!(
            parse(&no_time)
                .unwrap_err()
                .contains("without its name or time")
        );
        let ok = format!("{head}\n{{\"bench\": \"op\", \"name\": \"a \\\"b\\\"\", \"ms\": 2.5}}");
        let run = parse(&ok).unwrap();
        assert_eq!(run.rows[0].name, "a \"b\"");
        assert_eq!(run.rows[0].seconds, 2.5e-3);
    }
}
