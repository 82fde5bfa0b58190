//! The terminal REPL: rustyline with history, multi-line input that waits for balanced
//! brackets, completion from evcxr, coloured cards, Ctrl-C to interrupt a running cell.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Editor, Helper};

use super::cell_check::{Completeness, check};
use super::interrupter::Interrupter;
use super::render::render;
use super::session::Session;

type Shared = Arc<Mutex<Option<Session>>>;

/// Raised by the Ctrl-C handler; a watcher thread passes it to the session (a signal handler
/// may only touch atomics).
static CTRL_C: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    CTRL_C.store(true, Ordering::Relaxed);
}

struct CellHelper {
    session: Shared,
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

impl Completer for CellHelper {
    type Candidate = Pair;
    fn complete(
        &self,
        line: &str,
        pos: usize,
        _: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        // Never block the prompt on a session that is still starting or running a cell.
        let Ok(mut guard) = self.session.try_lock() else {
            return Ok((pos, Vec::new()));
        };
        let Some(s) = guard.as_mut() else {
            return Ok((pos, Vec::new()));
        };
        // The same candidates as the kernel's: names, not snippets with parameter names.
        let (start, _, names) = s.completions(line, pos);
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

pub fn run(banner: String, prepared: super::session::Prepared) -> i32 {
    println!("{banner}");
    println!("Rust cells with placelab preloaded. :help for commands, Ctrl-D to quit.");
    let colour = std::io::stdout().is_terminal();
    let shared: Shared = Arc::new(Mutex::new(None));
    // Start evcxr in the background: the prompt is there at once, the first cell waits.
    let starter = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            // On a terminal each line first clears the running cell's status line.
            let clear = if colour { "\r\x1b[K" } else { "" };
            let sink: super::session::Sink = Arc::new(move |is_err, line| {
                if is_err {
                    eprintln!("{clear}{line}")
                } else {
                    println!("{clear}{line}")
                }
            });
            let mut guard = shared.lock().unwrap_or_else(|e| e.into_inner());
            match Session::start(prepared, sink) {
                Ok(mut s) => {
                    // While the user types the first line; a cell entered meanwhile waits here.
                    s.warm_up();
                    *guard = Some(s);
                    Ok(())
                }
                Err(e) => Err(e),
            }
        })
    };
    let mut starter = Some(starter);
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    let interrupter: Arc<Mutex<Option<Interrupter>>> = Arc::default();
    {
        let interrupter = interrupter.clone();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(std::time::Duration::from_millis(20));
                if CTRL_C.swap(false, Ordering::Relaxed)
                    && let Some(i) = interrupter
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .as_ref()
                {
                    i.interrupt();
                }
            }
        });
    }
    let mut editor: Editor<CellHelper, rustyline::history::DefaultHistory> = match Editor::new() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("cannot start the line editor: {e}");
            return 1;
        }
    };
    editor.set_helper(Some(CellHelper {
        session: shared.clone(),
    }));
    let history = super::setup::cache_dir().join("history.txt");
    let _ = editor.load_history(&history);
    loop {
        match editor.readline(">> ") {
            Ok(line) => {
                if line.trim().is_empty() {
                    continue;
                }
                let _ = editor.add_history_entry(line.as_str());
                if super::magics::is_exit(&line) {
                    break;
                }
                if let Some(h) = starter.take() {
                    // Only when it is so: tests/repl_terminal.rs reads it as proof that the
                    // prompt took input before the evaluator was ready.
                    if !h.is_finished() {
                        eprintln!("(waiting for the Rust evaluator to finish starting…)");
                    }
                    if let Ok(Err(e)) = h.join() {
                        eprintln!("error: {e}");
                        return 1;
                    }
                }
                let mut guard = shared.lock().unwrap_or_else(|e| e.into_inner());
                let Some(session) = guard.as_mut() else {
                    return 1;
                };
                *interrupter.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(session.interrupter());
                let started = std::time::Instant::now();
                let report = session.execute_watched(&line, |change| {
                    // A status line, rewritten in place while a long cell runs (on stdout:
                    // stderr passes through a line-reading pipe, see `progress`).
                    if colour {
                        use std::io::Write;
                        print!(
                            "\r\x1b[K\x1b[2m── running {:.1} s · {}\x1b[0m",
                            started.elapsed().as_secs_f64(),
                            change.status_line()
                        );
                        let _ = std::io::stdout().flush();
                    }
                });
                if colour && report.duration >= super::session::LIVE_AFTER {
                    print!("\r\x1b[K");
                }
                let shown = render(&report, colour);
                if !shown.is_empty() {
                    println!("{shown}");
                }
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("error: {e}");
                break;
            }
        }
    }
    let _ = std::fs::create_dir_all(super::setup::cache_dir());
    let _ = editor.save_history(&history);
    0
}
