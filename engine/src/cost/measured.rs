//! placelab's own measurements on real GPUs, kept as data: each run is the JSON lines
//! `benches/gpu-check.sh` wrote there (one object a line), after a first line naming the GPU,
//! the date and the commit measured (`benches/keep-run.py` writes such a file from a run). The
//! build turns them into Rust data (`build/measured_runs.rs`), so the engine reads no JSON. The
//! cost model is fitted on them (`fit.rs`), and a prediction a learner sees on a simulated
//! device can be shown beside what that GPU measured. The text fields are `Cow`: borrowed in the
//! kept runs, owned in a run a benchmark just measured.

use std::borrow::Cow;

/// One run of `gpu-check.sh` on one GPU.
#[derive(Debug, Clone)]
pub struct Run {
    /// `h200-2026-11-26`.
    pub name: Cow<'static, str>,
    /// As the driver names it: `NVIDIA H200`.
    pub gpu: Cow<'static, str>,
    /// The key of the GPU in placelab's table (`h200`).
    pub spec: Cow<'static, str>,
    pub date: Cow<'static, str>,
    /// The commit of placelab that was measured.
    pub commit: Cow<'static, str>,
    pub rows: Cow<'static, [Row]>,
}

/// One measured line: what was measured and how long it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// `transfer`, `non_blocking` (a copy queued from pinned memory), `op` (timed whole, with a
    /// synchronize) or `profile` (one row of a profiled step: CUDA events around each op).
    pub bench: Cow<'static, str>,
    /// A transfer's `h2d_pinned`, …; an op's or a profile row's name.
    pub name: Cow<'static, str>,
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

/// The runs kept in the repository, oldest first.
pub fn runs() -> &'static [Run] {
    static RUNS: &[Run] = include!(concat!(env!("OUT_DIR"), "/measured_runs.rs"));
    RUNS
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kept_run_is_there_with_its_rows() {
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
}
