//! One cell, start to end, for every shell: a magic (`:mem`, `:del x`…) or Rust code, timed,
//! with the notice about a predecessor that died on the first cell, and the memory so far
//! reported while a long cell runs. Above both `session.rs` (which runs code) and `magics.rs`
//! (which uses the session), so neither names the other back.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::cell_check::forgive;
use super::magics;
use super::report::{CellReport, Output};
use super::session::Session;
use super::strip::MemoryChange;

/// A cell that runs past `LIVE_AFTER` has its memory shown every `LIVE_EVERY` (the REPL's status
/// line, the kernel's live strip) until it ends.
pub const LIVE_AFTER: Duration = Duration::from_secs(1);
const LIVE_EVERY: Duration = Duration::from_millis(300);

/// Runs one cell. Never fails: every problem is an `Output::Error` in the report, and the
/// session stays usable.
pub fn execute(s: &mut Session, cell: &str) -> CellReport {
    let start = Instant::now();
    let trimmed = cell.trim();
    if trimmed.is_empty() {
        return CellReport::default();
    }
    let mut report = match magics::dispatch(s, trimmed) {
        Some(report) => report,
        None => s.run_code(&forgive(cell)),
    };
    report.duration = start.elapsed();
    for (i, notice) in s.take_start_notices().into_iter().enumerate() {
        report.outputs.insert(i, Output::Info(notice));
    }
    report
}

/// Runs a cell like `execute`, calling `on_progress` with the memory so far every `LIVE_EVERY`
/// once it has run `LIVE_AFTER` (read from the cell process's side channel, so watching compiles
/// nothing). The last call happens before this returns.
pub fn execute_watched(
    s: &mut Session,
    cell: &str,
    mut on_progress: impl FnMut(MemoryChange) + Send,
) -> CellReport {
    let probe = s.probe.clone();
    let seq = s.last_seq;
    let before = probe.snapshot(seq).unwrap_or_default();
    let (stop, stopped) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut wait = LIVE_AFTER;
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(wait) {
                if let Some(now) = probe.snapshot(seq) {
                    // While the cell runs: its memory so far (what went idle is said at its end).
                    on_progress(MemoryChange {
                        before: before.clone(),
                        after: now,
                        idle_released: Vec::new(),
                    });
                }
                wait = LIVE_EVERY;
            }
        });
        let report = execute(s, cell);
        drop(stop);
        report
    })
}
