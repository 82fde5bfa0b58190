//! The one start path every shell uses (the REPL, scripts, the kernel): a thread owns the
//! `Session` (evcxr is blocking and not `Send`-friendly), starts it once, then runs jobs one at a
//! time and answers each on a oneshot channel. The prompt (or the kernel's sockets) are up at
//! once; a cell sent while the session starts waits for it. The interrupter is published as soon
//! as the session exists, so Ctrl-C or Jupyter's control channel can stop a cell without waiting
//! for this thread.

use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::cell;
use super::cell_output::{ClearSink, Sink};
use super::interrupter::{self, Asker, CellRequest, Interrupter, Stopped};
use super::report::{CellReport, Output};
use super::session::{Completion, Prepared, Session};
use super::strip::MemoryChange;
use placelab::display::html::el;

/// A completion asked for whose answer has not come yet.
pub struct AskedCompletion {
    code: String,
    pos: usize,
    answer: oneshot::Receiver<Completion>,
}

impl AskedCompletion {
    /// Whether this is the completion of `code` at `pos` (the same Tab, pressed again).
    pub fn is_for(&self, code: &str, pos: usize) -> bool {
        self.code == code && self.pos == pos
    }
}

/// Work for the evaluator thread.
pub enum Job {
    Execute {
        code: String,
        /// Who asked for the cell, and when: which interrupts may stop it.
        request: CellRequest,
        /// Called a few times a second with the memory so far, while a cell runs past a second.
        progress: Box<dyn FnMut(MemoryChange) + Send>,
        done: oneshot::Sender<CellReport>,
    },
    /// Completions at a byte offset: (start, end, candidates).
    Complete {
        code: String,
        pos: usize,
        done: oneshot::Sender<Completion>,
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

/// How far the session's start has got.
enum Start {
    Starting,
    Ready(Interrupter),
    Failed(String),
}

/// The evaluator as the shells see it.
#[derive(Clone)]
pub struct Evaluator {
    jobs: mpsc::Sender<Job>,
    start: Arc<(Mutex<Start>, Condvar)>,
    /// Disconnected when the thread has ended (and dropped the session).
    ended: Arc<Mutex<mpsc::Receiver<()>>>,
}

impl Evaluator {
    /// Starts the thread; the session compiles the engine in it (seconds on a warm cache). The
    /// cells' lines go to `sink` and their `clear_output()` to `clear` (the kernel's; without
    /// one, a clear takes nothing back) as they run. From now on SIGINT (a terminal's Ctrl-C, or
    /// a client using interrupt_mode "signal") interrupts the running cell instead of ending the
    /// process.
    pub fn spawn(
        prepared: Prepared,
        sink: Sink,
        clear: Option<ClearSink>,
        analyzer: Analyzer,
    ) -> Evaluator {
        let (jobs, queue) = mpsc::channel::<Job>();
        let start = Arc::new((Mutex::new(Start::Starting), Condvar::new()));
        let published = start.clone();
        let (ending, ended) = mpsc::channel::<()>();
        // Here, before a line editor saves the disposition it restores after each line.
        interrupt_on_sigint(start.clone());
        std::thread::Builder::new()
            .name("placelab-evaluator".into())
            .spawn(move || {
                let _ending = ending;
                // A start that panics must not leave the shells waiting for ever.
                let failed = FailUnlessStarted(published.clone());
                let session = Session::start(prepared, sink);
                let state = match &session {
                    Ok(s) => {
                        if let Some(clear) = clear {
                            s.on_clear_output(clear);
                        }
                        Start::Ready(s.interrupter())
                    }
                    Err(e) => Start::Failed(e.clone()),
                };
                *published.0.lock().unwrap_or_else(|e| e.into_inner()) = state;
                published.1.notify_all();
                drop(failed);
                serve(session, queue, analyzer);
            })
            .expect("the evaluator thread starts");
        Evaluator {
            jobs,
            start,
            ended: Arc::new(Mutex::new(ended)),
        }
    }

    /// For the shell's exit, once every other handle is gone: closes the job queue and waits (up
    /// to `limit`) for the thread to drop the session, which stops the cell's process and removes
    /// the session's compile directory.
    pub fn finish(self, limit: Duration) {
        let Evaluator { jobs, ended, .. } = self;
        drop(jobs);
        let ended = ended.lock().unwrap_or_else(|e| e.into_inner());
        let _ = ended.recv_timeout(limit);
    }

    /// Sends a job; `false` when the evaluator thread is gone.
    pub fn submit(&self, job: Job) -> bool {
        self.jobs.send(job).is_ok()
    }

    /// Runs a cell and waits for its report (the REPL and scripts; the kernel awaits the job).
    pub fn execute(
        &self,
        code: &str,
        progress: impl FnMut(MemoryChange) + Send + 'static,
    ) -> CellReport {
        let (done, answer) = oneshot::channel();
        let job = Job::Execute {
            code: code.to_string(),
            request: CellRequest::now(None),
            progress: Box::new(progress),
            done,
        };
        if !self.submit(job) {
            return CellReport::error("the Rust evaluator has stopped; start placelab again");
        }
        answer.blocking_recv().unwrap_or_else(|_| {
            CellReport::error("the Rust evaluator stopped while running this cell")
        })
    }

    /// Completions, if the session answers within `limit` (a prompt must never hang on them).
    /// An answer that does not come in time is kept in `asked`: the next call for the same line
    /// and cursor (a second Tab) waits for it, not for a new one behind it. rust-analyzer may
    /// take longer than the limit on a busy machine, after a restart or a long cell.
    pub fn complete(
        &self,
        code: &str,
        pos: usize,
        limit: Duration,
        asked: &mut Option<AskedCompletion>,
    ) -> Completion {
        let nothing = (pos, pos, Vec::new());
        if !self.is_ready() {
            return nothing;
        }
        let mut waiting = match asked.take() {
            Some(a) if a.is_for(code, pos) => a,
            // Another line's answer is dropped: if it has not started, it never runs.
            _ => {
                let (done, answer) = oneshot::channel();
                let job = Job::Complete {
                    code: code.to_string(),
                    pos,
                    done,
                };
                if !self.submit(job) {
                    return nothing;
                }
                AskedCompletion {
                    code: code.to_string(),
                    pos,
                    answer,
                }
            }
        };
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            match waiting.answer.try_recv() {
                Ok(found) => return found,
                Err(oneshot::error::TryRecvError::Empty) => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(oneshot::error::TryRecvError::Closed) => return nothing,
            }
        }
        *asked = Some(waiting);
        nothing
    }

    /// Whether the session has started (the engine is compiled into the evaluator).
    pub fn is_ready(&self) -> bool {
        matches!(
            *self.start.0.lock().unwrap_or_else(|e| e.into_inner()),
            Start::Ready(_)
        )
    }

    /// Waits until the session has started; `Err` says why it could not.
    pub fn wait_started(&self) -> Result<(), String> {
        let (state, changed) = &*self.start;
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        while matches!(*s, Start::Starting) {
            s = changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        match &*s {
            Start::Failed(why) => Err(why.clone()),
            _ => Ok(()),
        }
    }

    /// A kernel's cell is about to be submitted, as `request`: an interrupt meant for it from
    /// now on stops it, even before it begins.
    pub fn cell_asked(&self, request: &CellRequest) {
        with_interrupter(&self.start.0, |i| {
            i.cell_asked(request.clone());
            Stopped::NoCell
        });
    }

    /// Stops the user's cell, if the interrupt can be meant for it; says what it stopped.
    pub fn interrupt(&self, asker: &Asker) -> Stopped {
        with_interrupter(&self.start.0, |i| i.interrupt(asker))
    }
}

/// Says the start failed if it ends (a panic unwinding) while the state still says `Starting`.
struct FailUnlessStarted(Arc<(Mutex<Start>, Condvar)>);

impl Drop for FailUnlessStarted {
    fn drop(&mut self) {
        let (state, changed) = &*self.0;
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*s, Start::Starting) {
            *s = Start::Failed("the Rust evaluator's thread ended while it started".into());
            changed.notify_all();
        }
    }
}

/// From now on SIGINT interrupts the running cell. A line editor in raw mode reads Ctrl-C as a
/// key, so at a prompt it never arrives here.
fn interrupt_on_sigint(start: Arc<(Mutex<Start>, Condvar)>) {
    interrupter::catch_sigint();
    // Not a whole `Evaluator`: its job queue must close when the shell lets go of it.
    std::thread::spawn(move || {
        let mut seen = interrupter::sigints();
        loop {
            std::thread::sleep(Duration::from_millis(20));
            let now = interrupter::sigints();
            if now != seen {
                // Each SIGINT counted: two close together are two interrupts, each for the
                // cell that was asked for before it.
                for n in seen + 1..=now {
                    with_interrupter(&start.0, |i| i.interrupt(&Asker::Signal(n)));
                }
                seen = now;
            }
        }
    });
}

/// `stop` on the session's interrupter, once it has one; no cell before.
fn with_interrupter(start: &Mutex<Start>, stop: impl FnOnce(&Interrupter) -> Stopped) -> Stopped {
    match &*start.lock().unwrap_or_else(|e| e.into_inner()) {
        Start::Ready(i) => stop(i),
        _ => Stopped::NoCell,
    }
}

/// How long rust-analyzer's process stays after the last completion or inspection that needed
/// it: `PLACELAB_ANALYZER_QUIET` seconds, 120 by default. Loading it again takes seconds of CPU;
/// keeping it holds hundreds of MiB per learner.
fn analyzer_quiet() -> Duration {
    crate::settings::seconds("PLACELAB_ANALYZER_QUIET", Duration::from_secs(120))
}

/// When rust-analyzer is loaded: completion and inspection need it, a cell only when rustc's
/// name for a variable's type does not resolve and the cell wrote no path for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Analyzer {
    /// By the first completion or inspection, and let go after [`analyzer_quiet`] without one:
    /// kernels, of which a class runs many.
    OnDemand,
    /// As soon as no cell waits after the start, and kept: a terminal's Tab answers within its
    /// two seconds, and there is one REPL per user.
    Warm,
}

/// The thread's loop: jobs in order. On demand, rust-analyzer is let go once no completion or
/// inspection has come for [`analyzer_quiet`]; warm, it is loaded at the first moment no job
/// waits, so a cell already sent (typed ahead) gets its result first. Ends when every
/// `Evaluator` handle is gone; dropping the session then ends the cell's process.
fn serve(mut session: Result<Session, String>, queue: mpsc::Receiver<Job>, analyzer: Analyzer) {
    let mut release_at: Option<Instant> = None;
    let mut warm = analyzer == Analyzer::OnDemand || session.is_err();
    loop {
        let next = match release_at {
            _ if !warm => queue.try_recv().map_err(|e| match e {
                mpsc::TryRecvError::Empty => mpsc::RecvTimeoutError::Timeout,
                mpsc::TryRecvError::Disconnected => mpsc::RecvTimeoutError::Disconnected,
            }),
            Some(at) => queue.recv_timeout(at.saturating_duration_since(Instant::now())),
            None => queue
                .recv()
                .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        let job = match next {
            Ok(job) => job,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            // Nothing waits: the moment to load rust-analyzer (warm) or to let it go.
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Ok(s) = &mut session {
                    match warm {
                        false => s.warm_up(),
                        true => s.release_analyzer(),
                    }
                }
                (warm, release_at) = (true, None);
                continue;
            }
        };
        let asks_analyzer = matches!(job, Job::Complete { .. } | Job::Inspect { .. });
        run(&mut session, job);
        // A cell loads it too, rarely: when rustc's name for a variable's type does not resolve.
        let loaded = session.as_ref().is_ok_and(|s| s.analyzer_loaded());
        if analyzer == Analyzer::OnDemand && loaded && (asks_analyzer || release_at.is_none()) {
            release_at = Some(Instant::now() + analyzer_quiet());
        }
    }
    drop(session);
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
            request,
            progress,
            done,
        } => {
            let interrupter = s.interrupter();
            let report = if interrupter.job_begins(&request) {
                CellReport::stopped_before_start()
            } else {
                cell::execute_watched(s, &code, progress)
            };
            interrupter.job_ends();
            let _ = done.send(report);
        }
        // Nobody waits for these any more (a prompt gave up on its completions): not run.
        Job::Complete { done, .. } if done.is_closed() => {}
        Job::Inspect { done, .. } if done.is_closed() => {}
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
            html: html.map(|card| {
                el("p")
                    .child(el("code").text(&format!("{word}: {ty}")))
                    .into_string()
                    + &card
            }),
        });
    }
    s.hover(code, end).map(|(plain, html)| Inspection {
        plain,
        html: Some(html),
    })
}
