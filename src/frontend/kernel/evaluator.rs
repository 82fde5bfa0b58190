//! The thread that owns the kernel's `Session` (evcxr is blocking and not `Send`-friendly): it
//! starts the session once, then runs jobs from the async side one at a time and answers each on
//! a oneshot channel. The interrupter is published as soon as the session exists, so the control
//! channel can stop a cell without waiting for this thread.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::frontend::interrupter::Interrupter;
use crate::frontend::report::{CellReport, Output};
use crate::frontend::session::{ClearSink, Prepared, Session, Sink};
use crate::frontend::strip::MemoryChange;
use crate::html::escape;

/// Work for the evaluator thread.
pub enum Job {
    Execute {
        code: String,
        /// Called a few times a second with the memory so far, while a cell runs past a second.
        progress: Box<dyn FnMut(MemoryChange) + Send>,
        done: oneshot::Sender<CellReport>,
    },
    /// Completions at a byte offset: (start, end, candidates).
    Complete {
        code: String,
        pos: usize,
        done: oneshot::Sender<(usize, usize, Vec<String>)>,
    },
    Inspect {
        code: String,
        pos: usize,
        done: oneshot::Sender<Option<Inspection>>,
    },
}

/// What `inspect_request` shows: text, and HTML when there is a card or rendered docs.
pub struct Inspection {
    pub plain: String,
    pub html: Option<String>,
}

/// The evaluator as the async side sees it.
#[derive(Clone)]
pub struct Evaluator {
    jobs: mpsc::Sender<Job>,
    interrupter: Arc<Mutex<Option<Interrupter>>>,
    /// Disconnected when the thread has ended (and dropped the session).
    ended: Arc<Mutex<mpsc::Receiver<()>>>,
}

impl Evaluator {
    /// Starts the thread; the session compiles the engine in it (seconds on a warm cache). The
    /// cells' lines go to `sink` and their `clear_output()` to `clear` as they run.
    pub fn spawn(prepared: Prepared, sink: Sink, clear: ClearSink) -> Evaluator {
        let (jobs, queue) = mpsc::channel::<Job>();
        let interrupter: Arc<Mutex<Option<Interrupter>>> = Arc::default();
        let published = interrupter.clone();
        let (ending, ended) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("placelab-evaluator".into())
            .spawn(move || {
                let _ending = ending;
                let mut session = match Session::start(prepared, sink) {
                    Ok(s) => {
                        s.on_clear_output(clear);
                        *published.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(s.interrupter());
                        Ok(s)
                    }
                    Err(e) => Err(e),
                };
                // rust-analyzer is warmed up at the first moment no job waits: a cell already
                // sent (Run All, a class opening notebooks at once) gets its result first.
                let mut warm = session.is_err();
                loop {
                    let job = match queue.try_recv() {
                        Ok(job) => job,
                        Err(mpsc::TryRecvError::Empty) if !warm => {
                            if let Ok(s) = &mut session {
                                s.warm_up();
                            }
                            warm = true;
                            continue;
                        }
                        Err(mpsc::TryRecvError::Empty) => match queue.recv() {
                            Ok(job) => job,
                            Err(_) => break,
                        },
                        Err(mpsc::TryRecvError::Disconnected) => break,
                    };
                    run(&mut session, job);
                }
                // The job channel closed: the kernel is shutting down. Dropping the session
                // here ends the cell's process.
                drop(session);
            })
            .expect("the evaluator thread starts");
        Evaluator {
            jobs,
            interrupter,
            ended: Arc::new(Mutex::new(ended)),
        }
    }

    /// For the kernel's exit, once every other handle is gone: closes the job queue and waits (up
    /// to `limit`) for the thread to drop the session, which stops the cell's process and removes
    /// the session's compile directory.
    pub fn finish(self, limit: std::time::Duration) {
        let Evaluator { jobs, ended, .. } = self;
        drop(jobs);
        let ended = ended.lock().unwrap_or_else(|e| e.into_inner());
        let _ = ended.recv_timeout(limit);
    }

    /// Sends a job; `false` when the evaluator thread is gone.
    pub fn submit(&self, job: Job) -> bool {
        self.jobs.send(job).is_ok()
    }

    /// Whether the session has started (the engine is compiled into the evaluator).
    pub fn is_ready(&self) -> bool {
        self.interrupter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Stops the running cell, if any; returns whether one was running.
    pub fn interrupt(&self) -> bool {
        self.interrupter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(Interrupter::interrupt)
    }
}

fn run(session: &mut Result<Session, String>, job: Job) {
    let s = match session {
        Ok(s) => s,
        Err(why) => {
            let why = format!("the Rust evaluator could not start: {why}");
            match job {
                Job::Execute { done, .. } => {
                    let _ = done.send(CellReport::error(why));
                }
                Job::Complete { pos, done, .. } => {
                    let _ = done.send((pos, pos, Vec::new()));
                }
                Job::Inspect { done, .. } => {
                    let _ = done.send(None);
                }
            }
            return;
        }
    };
    match job {
        Job::Execute {
            code,
            progress,
            done,
        } => {
            let report = s.execute_watched(&code, progress);
            let _ = done.send(report);
        }
        Job::Complete { code, pos, done } => {
            let _ = done.send(s.completions(&code, pos));
        }
        Job::Inspect { code, pos, done } => {
            let _ = done.send(inspect(s, &code, pos));
        }
    }
}

/// A session variable under the cursor shows its type and value (a tensor's card); anything
/// else shows what rust-analyzer knows of it (an engine method's signature and doc line).
fn inspect(s: &mut Session, code: &str, pos: usize) -> Option<Inspection> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    // The word around the cursor; the character before it may be any width (`·`, `→`).
    let start = code[..pos]
        .char_indices()
        .rev()
        .find(|(_, c)| !is_ident(*c))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let end = code[pos..]
        .find(|c: char| !is_ident(c))
        .map_or(code.len(), |i| pos + i);
    let word = &code[start..end];
    if let Some((_, ty)) = s.variables().into_iter().find(|(n, _)| n == word) {
        let (plain, html) = match s.show_variable(word) {
            Some(Output::Value { plain, html, .. }) => (plain, html),
            _ => (String::new(), None),
        };
        return Some(Inspection {
            plain: format!("{word}: {ty}\n{plain}"),
            html: html.map(|h| format!("<p><code>{word}: {}</code></p>{h}", escape(&ty))),
        });
    }
    s.hover(code, end).map(|(plain, html)| Inspection {
        plain,
        html: Some(html),
    })
}
