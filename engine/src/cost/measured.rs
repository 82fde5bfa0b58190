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

/// A run's first line: which run, on which GPU, of which commit.
#[derive(serde::Deserialize)]
struct Head {
    run: String,
    gpu: String,
    spec: String,
    date: String,
    commit: String,
}

/// A measurement line as `gpu-check.sh` writes it (its other fields are left out): a transfer's
/// `kind` and `event_ms`, an op's or a profile row's `name` and `ms`, and PyTorch's and the
/// host clock's times where measured.
#[derive(serde::Deserialize)]
struct Line {
    bench: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    bytes: Option<f64>,
    calls: Option<f64>,
    event_ms: Option<f64>,
    ms: Option<f64>,
    torch_ms: Option<f64>,
    torch_event_ms: Option<f64>,
    wall_ms: Option<f64>,
    call_ms: Option<f64>,
}

/// A run from its JSON lines: the first names the run, the rest are `gpu-check.sh`'s lines
/// (`peer` ones, between two GPUs, are kept out).
pub fn parse(text: &str) -> Result<Run, String> {
    let mut lines = text.lines().filter(|l| l.trim_start().starts_with('{'));
    let first = lines.next().ok_or("no lines")?;
    let head: Head = read(first)?;
    let mut run = Run {
        name: head.run,
        gpu: head.gpu,
        spec: head.spec,
        date: head.date,
        commit: head.commit,
        rows: Vec::new(),
    };
    for line in lines {
        let l: Line = read(line)?;
        let Some(bench) = l.bench else { continue };
        let (name, ms) = match bench.as_str() {
            "transfer" | "non_blocking" => (l.kind, l.event_ms),
            "op" | "profile" => (l.name, l.ms),
            _ => continue,
        };
        let (Some(name), Some(ms)) = (name, ms) else {
            return Err(format!("a {bench} line without its name or time: {line}"));
        };
        run.rows.push(Row {
            bench,
            name,
            bytes: l.bytes.unwrap_or(0.0) as u64,
            calls: l.calls.unwrap_or(1.0) as u64,
            seconds: ms / 1e3,
            torch_seconds: l.torch_ms.or(l.torch_event_ms).map(|t| t / 1e3),
            wall_seconds: l.wall_ms.or(l.call_ms).map(|t| t / 1e3),
        });
    }
    Ok(run)
}

/// One line read into `T`, or why not, with the line.
fn read<T: serde::de::DeserializeOwned>(line: &str) -> Result<T, String> {
    serde_json::from_str(line).map_err(|e| format!("{e} in the measurement line {line}"))
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
    fn a_line_that_does_not_read_is_refused_with_the_line() {
        let head = r#"{"run":"x","gpu":"g","spec":"h100","date":"d","commit":"c"}"#;
        let nested = format!("{head}\n{{\"bench\":\"op\",\"name\":{{\"a\":1}}}}");
        let error = parse(&nested).unwrap_err();
        assert!(
            error.contains("invalid type") && error.contains(r#""name":{"a":1}"#),
            "{error}"
        );
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
