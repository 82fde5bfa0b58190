//! Reading the cell process's stdout and stderr while cells run: plain lines stream to the
//! front end's sink as they come; `Tensor::show()` cards and failed cells (marked by
//! `placelab::cell_io`) are collected as the cell's outputs; `clear_output()` goes to the front
//! end at once, in order with the lines; sync lines tell the session that everything a cell
//! wrote has been read.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use evcxr::EvalContextOutputs;

use super::report::{ErrorKind, Output};
use placelab::cell_io::{FAILED_BEGIN, FAILED_END, Failure, SYNC};
use placelab::display::{CARD_BEGIN, CARD_END, CARD_HTML, CARD_PLAIN};
use placelab::show::{CLEAR_OUTPUT, FOLD_OUTPUT};

/// Where streamed stdout/stderr lines of cells go while they run (`true`: stderr).
pub type Sink = Arc<dyn Fn(bool, &str) + Send + Sync>;
/// Where a running cell's `clear_output(wait)` goes.
pub type ClearSink = Arc<dyn Fn(bool) + Send + Sync>;

#[derive(Default)]
struct State {
    outputs: Vec<Output>,
    synced: u64,
    /// A card's first line has been read and its last not yet: `take` waits for it.
    card_open: bool,
    /// Where `clear_output()` goes; none in the REPL and scripts, which keep everything.
    on_clear: Option<ClearSink>,
    /// A check in the cell had no prediction written (`exercise::check`): fold what it showed.
    fold: bool,
}

#[derive(Clone, Default)]
pub struct CellOutput(Arc<(Mutex<State>, Condvar)>);

impl CellOutput {
    /// Starts one reader thread per stream.
    pub fn read(streams: EvalContextOutputs, sink: Sink) -> CellOutput {
        let shared = CellOutput::default();
        let (out, sink_out) = (shared.clone(), sink.clone());
        std::thread::spawn(move || {
            // Lines between `show()`'s markers are a card, not output to stream.
            let mut card: Option<Vec<String>> = None;
            for line in streams.stdout {
                match (line.as_str(), card.as_mut()) {
                    (CARD_BEGIN, _) => {
                        out.card_begins();
                        card = Some(Vec::new());
                    }
                    (CARD_END, Some(lines)) => {
                        out.card_ends(parse_card(&lines.join("\n")));
                        card = None;
                    }
                    (_, Some(lines)) => lines.push(line),
                    (l, None) if l.starts_with(CLEAR_OUTPUT) => out.clear(l.ends_with("wait")),
                    (FOLD_OUTPUT, None) => out.ask_fold(),
                    _ => sink_out(false, &line),
                }
            }
        });
        let err = shared.clone();
        std::thread::spawn(move || {
            let mut in_backtrace = false;
            // The failure being read, and its lines.
            let mut failure: Option<(Option<Failure>, Vec<String>)> = None;
            for line in streams.stderr {
                if let Some(token) = line.strip_prefix(SYNC) {
                    let (state, changed) = &*err.0;
                    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                    s.synced = token.trim().parse().unwrap_or(s.synced);
                    changed.notify_all();
                } else if line.starts_with(FAILED_END) {
                    let (kind, lines) = failure.take().unwrap_or_default();
                    let text = lines.join("\n").trim().to_string();
                    let kind = match kind {
                        Some(Failure::Panic) => ErrorKind::Panic,
                        Some(Failure::Interrupted) => ErrorKind::Interrupted,
                        Some(Failure::Error) | None => ErrorKind::Error,
                    };
                    let text = match (text.is_empty(), kind) {
                        (false, _) => text,
                        (true, ErrorKind::Panic) => PANIC_LINE.to_string(),
                        (true, _) => "the cell returned an error".to_string(),
                    };
                    err.push(Output::error(kind, text));
                } else if let Some(kind) = line.strip_prefix(FAILED_BEGIN) {
                    failure = Some((Failure::parse(kind.trim()), Vec::new()));
                } else if let Some(shown) = filter_stderr(&line, &mut in_backtrace) {
                    match failure.as_mut() {
                        Some((_, lines)) => lines.push(shown),
                        None => sink(true, &shown),
                    }
                }
            }
        });
        shared
    }

    fn card_begins(&self) {
        let (state, _) = &*self.0;
        state.lock().unwrap_or_else(|e| e.into_inner()).card_open = true;
    }

    fn card_ends(&self, card: Output) {
        let (state, ended) = &*self.0;
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        s.outputs.push(card);
        s.card_open = false;
        ended.notify_all();
    }

    fn push(&self, o: Output) {
        let (state, _) = &*self.0;
        state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .outputs
            .push(o);
    }

    fn ask_fold(&self) {
        let (state, _) = &*self.0;
        state.lock().unwrap_or_else(|e| e.into_inner()).fold = true;
    }

    /// Whether the cell asked its output folded (read once the cell has ended; then lowered).
    pub fn take_fold(&self) -> bool {
        let (state, _) = &*self.0;
        std::mem::take(&mut state.lock().unwrap_or_else(|e| e.into_inner()).fold)
    }

    pub fn on_clear(&self, clear: ClearSink) {
        let (state, _) = &*self.0;
        state.lock().unwrap_or_else(|e| e.into_inner()).on_clear = Some(clear);
    }

    /// A cell's `clear_output()`: the cards it showed before are dropped (they are sent only
    /// when the cell ends, so they would be cleared too), and the front end is told now, after
    /// the lines streamed before it.
    fn clear(&self, wait: bool) {
        let clear = {
            let (state, _) = &*self.0;
            let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
            if s.on_clear.is_some() {
                s.outputs.retain(|o| !matches!(o, Output::Card { .. }));
            }
            s.on_clear.clone()
        };
        if let Some(clear) = clear {
            clear(wait);
        }
    }

    /// The cards and failures collected since the last call, failures last. Called once the
    /// cell has ended, when evcxr has handed this reader every line the cell printed; but the
    /// last card may still be being read (a long one: a profile's, whose timeline is megabytes
    /// of SVG), and it is the cell's, so it is waited for (at most `CARD_WAIT`). A failure ends
    /// the cell's code, so what the cell showed came before it, though the two streams are read
    /// apart and a card can end after a failure's short text was read (`:profile` of code that
    /// fails: the profile, then the error).
    pub fn take(&self) -> Vec<Output> {
        let (state, ended) = &*self.0;
        let deadline = Instant::now() + CARD_WAIT;
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        while s.card_open {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // A card never ended (its process died writing it): not waited for again.
                s.card_open = false;
                break;
            }
            s = ended
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let mut outputs = std::mem::take(&mut s.outputs);
        // Stable: the cards keep their order, and so do the failures.
        outputs.sort_by_key(|o| matches!(o, Output::Error { .. }));
        outputs
    }

    /// Waits (at most `limit`) until the sync line `token` has been read from stderr.
    pub fn wait_for_sync(&self, token: u64, limit: Duration) {
        let (state, changed) = &*self.0;
        let deadline = Instant::now() + limit;
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        while s.synced < token {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            s = changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// A card block from `Tensor::show()`: ANSI text, then plain text, then HTML, between markers.
fn parse_card(block: &str) -> Output {
    let (ansi, rest) = block.split_once(CARD_PLAIN).unwrap_or(("", block));
    let (plain, html) = match rest.split_once(CARD_HTML) {
        Some((p, h)) => (p, Some(h.trim().to_string())),
        None => (rest, None),
    };
    let plain = plain.trim().to_string();
    Output::Card {
        ansi: match ansi.trim() {
            "" => plain.clone(),
            a => a.to_string(),
        },
        plain,
        html,
    }
}

/// How long `take` waits for a card still being read when the cell ended.
const CARD_WAIT: Duration = Duration::from_secs(2);

const PANIC_LINE: &str = "panic in the cell (variables defined before it are kept)";

/// Shortens what a panicking cell prints: evcxr forces backtraces on, and their frames point
/// into generated code. The panic's own message is kept, under a line that says what happened.
fn filter_stderr(line: &str, in_backtrace: &mut bool) -> Option<String> {
    if *in_backtrace {
        if line.starts_with("note: Some details are omitted") {
            *in_backtrace = false;
        }
        return None;
    }
    if line.starts_with("stack backtrace:") {
        *in_backtrace = true;
        return None;
    }
    if line.starts_with("thread '") && line.contains("panicked at") {
        return Some(format!("{PANIC_LINE}:"));
    }
    Some(line.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failure read before the end of a card the cell printed first (the streams are read
    /// apart) still comes after it, and cards and failures keep their own order.
    #[test]
    fn failures_come_after_what_the_cell_showed() {
        let out = CellOutput::default();
        let card = |n: &str| parse_card(&format!("{CARD_PLAIN}\n{n}"));
        out.push(Output::error(ErrorKind::Error, "the code failed"));
        out.push(card("first"));
        out.push(card("second"));
        let taken = out.take();
        assert_eq!(
            taken,
            [
                card("first"),
                card("second"),
                Output::error(ErrorKind::Error, "the code failed")
            ]
        );
        assert!(out.take().is_empty());
    }

    /// A card whose end is still being read as the cell ends (a profile's megabytes of timeline)
    /// is waited for: it is the cell's, not the next one's.
    #[test]
    fn a_card_still_being_read_when_the_cell_ends_is_the_cells() {
        let out = CellOutput::default();
        let card = parse_card(&format!("{CARD_PLAIN}\nlate"));
        out.card_begins();
        let (reader, read) = (out.clone(), card.clone());
        let reading = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            reader.card_ends(read);
        });
        assert_eq!(out.take(), [card]);
        reading.join().unwrap();
    }
}
