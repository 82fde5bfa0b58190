//! A cell's stdout and stderr, streamed to iopub while it runs: lines are gathered for up to
//! `COALESCE` and sent as one `stream` message per name, as ipykernel does, so a loop that prints
//! thousands of lines does not flood the client with thousands of messages. A cell's
//! `clear_output()` goes out in order with them. What the cell printed is kept too, for a cell
//! whose output is folded when it ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jupyter_protocol::{ClearOutput, JupyterMessage, StreamContent};
use tokio::sync::{mpsc, oneshot};

use super::iopub::Iopub;
use crate::cell_output::{ClearSink, Sink};

const COALESCE: Duration = Duration::from_millis(50);

enum Event {
    Line {
        is_err: bool,
        line: String,
    },
    /// The cell called `clear_output(wait)`: sent after the lines before it.
    Clear(bool),
    /// Output from now on belongs to this request.
    Begin(Box<JupyterMessage>),
    /// Send what is buffered now, then answer.
    Flush(oneshot::Sender<()>),
}

#[derive(Clone)]
pub struct Streams {
    tx: mpsc::UnboundedSender<Event>,
    /// Raised when a `clear_output` went out (see `cleared`).
    cleared: Arc<AtomicBool>,
    /// What the current request printed since it began or was last cleared.
    printed: Arc<Mutex<Printed>>,
}

/// A request's stdout so far, and whether it wrote to stderr.
#[derive(Default)]
struct Printed {
    stdout: String,
    stderr: bool,
}

/// Past this, a cell's stdout is not kept (nor folded): a loop's thousands of lines.
const KEEP_PRINTED: usize = 1 << 20;

impl Streams {
    pub fn start(iopub: Iopub) -> Streams {
        let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
        let cleared = Arc::new(AtomicBool::new(false));
        let raise = cleared.clone();
        let printed = Arc::new(Mutex::new(Printed::default()));
        let keep = printed.clone();
        tokio::spawn(async move {
            let mut parent: Option<JupyterMessage> = None;
            let (mut out, mut err) = (String::new(), String::new());
            loop {
                let event = if out.is_empty() && err.is_empty() {
                    rx.recv().await
                } else {
                    match tokio::time::timeout(COALESCE, rx.recv()).await {
                        Ok(e) => e,
                        // Nothing new for a while: send what we have.
                        Err(_) => {
                            send(&iopub, parent.as_ref(), &mut out, &mut err);
                            continue;
                        }
                    }
                };
                match event {
                    None => break,
                    Some(Event::Line { is_err, line }) => {
                        if parent.is_some() {
                            keep_printed(&keep, is_err, &line);
                        }
                        let buf = if is_err { &mut err } else { &mut out };
                        buf.push_str(&line);
                        buf.push('\n');
                        if buf.len() > 64 * 1024 {
                            send(&iopub, parent.as_ref(), &mut out, &mut err);
                        }
                    }
                    Some(Event::Clear(wait)) => {
                        send(&iopub, parent.as_ref(), &mut out, &mut err);
                        if let Some(parent) = &parent {
                            iopub.send(ClearOutput { wait }, parent);
                            raise.store(true, Ordering::Release);
                            *keep.lock().unwrap_or_else(|e| e.into_inner()) = Printed::default();
                        }
                    }
                    Some(Event::Begin(p)) => {
                        send(&iopub, parent.as_ref(), &mut out, &mut err);
                        parent = Some(*p);
                        *keep.lock().unwrap_or_else(|e| e.into_inner()) = Printed::default();
                    }
                    Some(Event::Flush(done)) => {
                        send(&iopub, parent.as_ref(), &mut out, &mut err);
                        let _ = done.send(());
                    }
                }
            }
        });
        Streams {
            tx,
            cleared,
            printed,
        }
    }

    /// What the current request printed on stdout, once it is out (after `flush`); `None` when
    /// it wrote to stderr too, or more than `KEEP_PRINTED`: such output is not folded.
    pub fn printed(&self) -> Option<String> {
        let printed = self.printed.lock().unwrap_or_else(|e| e.into_inner());
        (!printed.stderr && printed.stdout.len() <= KEEP_PRINTED).then(|| printed.stdout.clone())
    }

    /// Clears the request's output on the page (as the cell's own `clear_output(wait)` does),
    /// after the lines before it; waits until it is out.
    pub async fn clear(&self, wait: bool) {
        let _ = self.tx.send(Event::Clear(wait));
        self.flush().await;
    }

    /// Where the session writes the cell process's lines.
    pub fn sink(&self) -> Sink {
        let tx = self.tx.clone();
        std::sync::Arc::new(move |is_err, line| {
            let _ = tx.send(Event::Line {
                is_err,
                line: line.to_string(),
            });
        })
    }

    /// Where the session sends a cell's `clear_output(wait)`.
    pub fn clear_sink(&self) -> ClearSink {
        let tx = self.tx.clone();
        Arc::new(move |wait| {
            let _ = tx.send(Event::Clear(wait));
        })
    }

    /// Raised when a `clear_output` goes out, lowered by the memory strip: a strip shown before
    /// the clear is gone from the page, so it is sent again rather than updated in place.
    pub fn cleared(&self) -> Arc<AtomicBool> {
        self.cleared.clone()
    }

    pub fn begin(&self, parent: &JupyterMessage) {
        let _ = self.tx.send(Event::Begin(Box::new(parent.clone())));
    }

    /// Waits until every line received so far has gone out.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Event::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

fn keep_printed(printed: &Mutex<Printed>, is_err: bool, line: &str) {
    let mut printed = printed.lock().unwrap_or_else(|e| e.into_inner());
    if is_err {
        printed.stderr = true;
    } else if printed.stdout.len() <= KEEP_PRINTED {
        printed.stdout.push_str(line);
        printed.stdout.push('\n');
    }
}

fn send(iopub: &Iopub, parent: Option<&JupyterMessage>, out: &mut String, err: &mut String) {
    let Some(parent) = parent else {
        // Output before any request (the engine compiling at start-up) goes to the log.
        for text in [out, err] {
            if !text.is_empty() {
                super::log::log(text.trim_end());
                text.clear();
            }
        }
        return;
    };
    if !out.is_empty() {
        iopub.send(StreamContent::stdout(&std::mem::take(out)), parent);
    }
    if !err.is_empty() {
        iopub.send(StreamContent::stderr(&std::mem::take(err)), parent);
    }
}
