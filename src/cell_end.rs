//! The end of a cell, in the session: the cell process reads the index checks the cell's GPU
//! kernels made as they ran (`probe`'s `cell_end`), so that a bad index fails the cell that
//! queued the op, naming the variables that cell defined, rather than the next cell that waits
//! for the device.

use std::time::Duration;

use super::probe_client::{ProbeClient, Reply, Request};
use super::report::{ErrorKind, Output};

/// How long one ask at the end of a cell waits for GPUs still running the cell's checked work:
/// well inside the time the probe's reply may take (`PROBE_PATIENCE`). The session asks again
/// until that work is done or the user interrupts the wait, so no clock decides which cell a
/// bad index fails.
const CELL_END_ASK: Duration = Duration::from_millis(250);

/// What the end of a cell adds to its outputs: an error for each device-side error found, and a
/// note for each device whose wait the user interrupted (its checks are read later). `before`
/// and `after` are the session's variables around the cell, `code` the cell's code. Unless
/// `may_wait` (an interrupt came since the code ended), only the checks already done are read.
pub(super) fn device_checks(
    probe: &ProbeClient,
    code: &str,
    (before, after): (&[String], &[String]),
    may_wait: bool,
) -> Vec<Output> {
    let (mut found, mut failed, mut stopped) = (Vec::new(), Vec::new(), Vec::new());
    let wait_ms = if may_wait {
        CELL_END_ASK.as_millis() as u64
    } else {
        0
    };
    while let Some(Reply::CellEnd {
        found: found_now,
        failed: failed_now,
        still_running,
        stopped: stopped_now,
    }) = probe.ask(Request::CellEnd { wait_ms })
    {
        found.extend(found_now);
        failed.extend(failed_now);
        stopped.extend(stopped_now);
        if still_running.is_empty() || !may_wait {
            break;
        }
    }
    let defined = defined_by(code, before, after);
    let holders = match &defined[..] {
        [] => String::new(),
        names => format!(
            "\nThis cell defined {}: those made from that op's result hold invalid values.",
            names.join(", ")
        ),
    };
    let stopped = stopped.into_iter().map(|device| {
        Output::Info(format!(
            "The wait for {device} to finish this cell's work was interrupted, so the index \
             checks its kernels make (index_select, nll_loss) are read at the next wait for the \
             device: a bad index would be reported then, in a later cell."
        ))
    });
    (found.into_iter().map(|text| text + &holders))
        .chain(failed)
        .map(|text| Output::error(ErrorKind::Error, text))
        .chain(stopped)
        .collect()
}

/// The variables the cell defined, as `` `name` ``: those of `after` that are new since `before`,
/// or that a `let` of `code` binds again.
fn defined_by(code: &str, before: &[String], after: &[String]) -> Vec<String> {
    let bound = let_bound(code);
    let mut names: Vec<String> = (after.iter())
        .filter(|n| !before.contains(n) || bound.contains(&n.as_str()))
        .map(|n| format!("`{n}`"))
        .collect();
    names.sort();
    names
}

/// The words of `code`'s `let` patterns (up to the `=` or `;`): a superset of the names they
/// bind, to be matched against the session's variables.
fn let_bound(code: &str) -> Vec<&str> {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut words = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("let") {
        let starts = rest[..at].chars().next_back().is_none_or(|c| !is_word(c));
        let after = &rest[at + 3..];
        rest = after;
        if !starts || after.chars().next().is_none_or(is_word) {
            continue;
        }
        let pattern = &after[..after.find(['=', ';']).unwrap_or(after.len())];
        words.extend(
            pattern
                .split(|c: char| !is_word(c))
                .filter(|w| !w.is_empty()),
        );
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_a_cell_defined_are_the_new_ones_and_those_it_binds_again() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let code = "let d = Device::Cuda(0);\nlet (mut y, z): (Tensor, Tensor) = f(&d)?;\n\
                    let outlet = 1; // let w\nw = 3;";
        let before = names(&["w", "y", "kept"]);
        let after = names(&["w", "y", "kept", "d", "z", "outlet"]);
        assert_eq!(
            defined_by(code, &before, &after),
            ["`d`", "`outlet`", "`w`", "`y`", "`z`"]
        );
        assert!(defined_by("x + 1", &before, &before).is_empty());
    }
}
