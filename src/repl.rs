//! The terminal REPL: rustyline with history, multi-line input that waits for balanced
//! brackets, completion from evcxr, coloured cards, Ctrl-C to interrupt a running cell. The
//! session runs on the shared `Evaluator`, as the kernel's does.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{
    Cmd, ConditionalEventHandler, Context, Editor, Event, EventContext, EventHandler, Helper,
    KeyEvent, RepeatCount,
};

use super::cell::LIVE_AFTER;
use super::cell_check::{Completeness, check};
use super::cell_output::Sink;
use super::evaluator::{Analyzer, AskedCompletion, Evaluator};
use super::render::render;
use super::session::Prepared;

type LineEditor = Editor<CellHelper, rustyline::history::DefaultHistory>;

struct CellHelper {
    evaluator: Evaluator,
    /// A Tab's completion that did not answer within its two seconds; the next Tab on the same
    /// line waits for it.
    asked: Mutex<Option<AskedCompletion>>,
}

impl Helper for CellHelper {}
impl Highlighter for CellHelper {}
impl Hinter for CellHelper {
    type Hint = String;
}

impl Validator for CellHelper {
    fn validate(&self, ctx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        // An invalid cell runs anyway: the compiler's error says more than a refusal would.
        Ok(match check(ctx.input()) {
            Completeness::Incomplete(_) => ValidationResult::Incomplete,
            Completeness::Complete | Completeness::Invalid => ValidationResult::Valid(None),
        })
    }
}

/// How long a Tab waits for its completions, and a second Tab on the same line.
const TAB_WAIT: Duration = Duration::from_secs(2);
const TAB_AGAIN_WAIT: Duration = Duration::from_secs(30);

/// How long a Tab waits: [`TAB_WAIT`], or [`TAB_AGAIN_WAIT`] when it is pressed again on the
/// same line (`again`).
fn tab_wait(again: bool) -> Duration {
    if again { TAB_AGAIN_WAIT } else { TAB_WAIT }
}

impl Completer for CellHelper {
    type Candidate = Pair;
    fn complete(
        &self,
        line: &str,
        pos: usize,
        _: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        // The same candidates as the kernel's (names, not snippets with parameter names); none
        // while the session starts, and none after 2 s: a Tab never holds the prompt for long.
        // Pressed again on the same line, it waits for the answer the first one asked for, which
        // rust-analyzer may take longer to give on a busy machine: the person asked twice.
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        let again = asked.as_ref().is_some_and(|a| a.is_for(line, pos));
        let (start, _, names) = self
            .evaluator
            .complete(line, pos, tab_wait(again), &mut asked);
        let pairs = names
            .into_iter()
            .map(|n| Pair {
                display: n.clone(),
                replacement: n,
            })
            .collect();
        Ok((start, pairs))
    }
}

pub fn run(banner: String, prepared: Prepared) -> i32 {
    println!("{banner}");
    println!("Rust cells with placelab preloaded. :help for commands, Ctrl-D to quit.");
    let colour = std::io::stdout().is_terminal();
    // The prompt is there at once; the first cell waits for the session to start.
    let evaluator = Evaluator::spawn(prepared, sink(colour), None, Analyzer::Warm);
    let mut editor: LineEditor = match Editor::new() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("cannot start the line editor: {e}");
            return 1;
        }
    };
    editor.set_helper(Some(CellHelper {
        evaluator: evaluator.clone(),
        asked: Mutex::new(None),
    }));
    let typed_ahead = Arc::new(AtomicBool::new(false));
    editor.bind_sequence(
        KeyEvent::ctrl('@'),
        EventHandler::Conditional(Box::new(TypedAheadEof(typed_ahead.clone()))),
    );
    let history = super::setup::cache_dir().join("history.txt");
    let _ = editor.load_history(&history);
    let keep_output = KeepOutputOnCtrlC::set();
    let code = read_eval_print(&mut editor, &evaluator, colour, &typed_ahead);
    drop(keep_output);
    let _ = std::fs::create_dir_all(super::setup::cache_dir());
    let _ = editor.save_history(&history);
    drop(editor);
    // A session still starting cannot be finished: leave at once (the next start sweeps it).
    let limit = match evaluator.is_ready() {
        true => super::interrupter::interrupt_grace() + Duration::from_secs(3),
        false => Duration::ZERO,
    };
    evaluator.finish(limit);
    code
}

/// Ctrl-D typed while a cell runs reaches the terminal in cooked mode, whose line discipline
/// keeps it as a NUL byte that the next prompt reads as Ctrl-@. On an empty line, and only when
/// it was typed ahead (input was waiting as the prompt appeared), it is the Ctrl-D the user
/// meant; Ctrl-Space, which also sends NUL, does nothing at a prompt the user is typing at.
struct TypedAheadEof(Arc<AtomicBool>);

impl ConditionalEventHandler for TypedAheadEof {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, ctx: &EventContext) -> Option<Cmd> {
        let ahead = self.0.swap(false, Ordering::Relaxed);
        // Noop, not the default: rustyline would take the next key along with it.
        Some(match ahead && ctx.line().is_empty() {
            true => Cmd::EndOfFile,
            false => Cmd::Noop,
        })
    }
}

/// While a cell runs the terminal is in cooked mode, where Ctrl-C by default also discards the
/// output the terminal has not shown yet: a second Ctrl-C erased the stopped cell's error and
/// memory strip (the terminal test saw it on a loaded machine), and one Ctrl-C the last lines a
/// cell printed. NOFLSH keeps them; the input typed ahead, which the flush also dropped, is
/// dropped by `drop_typed_ahead` after an interrupted cell. The terminal's flags come back at
/// the end.
struct KeepOutputOnCtrlC(Option<libc::termios>);

impl KeepOutputOnCtrlC {
    fn set() -> KeepOutputOnCtrlC {
        let mut read = std::mem::MaybeUninit::<libc::termios>::uninit();
        // SAFETY: tcgetattr fills the termios, or fails (stdin is not a terminal) and it is not
        // read.
        let saved = unsafe {
            match libc::tcgetattr(0, read.as_mut_ptr()) {
                0 => read.assume_init(),
                _ => return KeepOutputOnCtrlC(None),
            }
        };
        let mut kept = saved;
        kept.c_lflag |= libc::NOFLSH;
        // SAFETY: flags read from this terminal, one more bit set.
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &kept) };
        KeepOutputOnCtrlC(Some(saved))
    }
}

impl Drop for KeepOutputOnCtrlC {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            // SAFETY: the flags this terminal had when the REPL began.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, saved) };
        }
    }
}

/// What was typed while a cell ran that a Ctrl-C stopped is dropped, as a terminal without
/// NOFLSH drops it: the user stopped the work, not only its first cell.
fn drop_typed_ahead() {
    // SAFETY: discards stdin's pending input; fails harmlessly when stdin is not a terminal.
    unsafe { libc::tcflush(0, libc::TCIFLUSH) };
}

/// Whether input is already waiting on stdin (typed while a cell ran). `poll`, not `FIONREAD`:
/// in cooked mode the line discipline's count leaves out a pending end-of-file.
fn input_waiting() -> bool {
    let mut stdin = libc::pollfd {
        fd: 0,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let ready = unsafe { libc::poll(&mut stdin, 1, 0) };
    ready == 1 && stdin.revents & libc::POLLIN != 0
}

/// Where the cells' own output goes: on a terminal each line first clears the running cell's
/// status line.
fn sink(colour: bool) -> Sink {
    let clear = if colour { "\r\x1b[K" } else { "" };
    Arc::new(move |is_err, line| {
        if is_err {
            eprintln!("{clear}{line}")
        } else {
            println!("{clear}{line}")
        }
    })
}

/// The loop: a line (or several, until brackets balance), then its report. Returns the exit
/// code.
fn read_eval_print(
    editor: &mut LineEditor,
    evaluator: &Evaluator,
    colour: bool,
    typed_ahead: &AtomicBool,
) -> i32 {
    let mut first = true;
    loop {
        typed_ahead.store(input_waiting(), Ordering::Relaxed);
        let line = match editor.readline(">> ") {
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => return 0,
            Err(e) => {
                eprintln!("error: {e}");
                return 0;
            }
        };
        let _ = editor.add_history_entry(line.as_str());
        if super::magics::is_exit(&line) {
            return 0;
        }
        if std::mem::take(&mut first) {
            // Only when it is so: tests/repl_terminal.rs reads it as proof that the prompt took
            // input before the evaluator was ready.
            if !evaluator.is_ready() {
                eprintln!("(waiting for the Rust evaluator to finish starting…)");
            }
            if let Err(e) = evaluator.wait_started() {
                eprintln!("error: {e}");
                return 1;
            }
        }
        let sigints = super::interrupter::sigints();
        let report = evaluator.execute(&line, status_line(colour));
        if super::interrupter::sigints() != sigints {
            drop_typed_ahead();
        }
        if colour && report.duration >= LIVE_AFTER {
            print!("\r\x1b[K");
        }
        let shown = render(&report, colour);
        if !shown.is_empty() {
            println!("{shown}");
        }
    }
}

/// A status line, rewritten in place while a long cell runs (on stdout: stderr passes through a
/// line-reading pipe, see `progress`); nothing when output is not a terminal.
fn status_line(colour: bool) -> impl FnMut(super::strip::MemoryChange) + Send + 'static {
    let started = Instant::now();
    move |change| {
        if colour {
            print!(
                "\r\x1b[K\x1b[2m── running {:.1} s · {}\x1b[0m",
                started.elapsed().as_secs_f64(),
                change.status_line()
            );
            let _ = std::io::stdout().flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A first Tab never holds the prompt for long; a second one on the same line waits for the
    /// answer the first asked for, as long as rust-analyzer may take on a loaded machine to read
    /// a restarted session's context. repl_terminal's `TAB_PRESSES` (at most 2) counts on that
    /// wait, but catches a short one only when rust-analyzer is slow: this catches it always.
    #[test]
    fn a_second_tab_waits_for_the_answer_the_first_asked_for() {
        assert!(tab_wait(false) <= Duration::from_secs(2));
        assert!(tab_wait(true) >= Duration::from_secs(20));
    }
}
