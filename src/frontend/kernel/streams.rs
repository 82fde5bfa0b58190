//! A cell's stdout and stderr, streamed to iopub while it runs: lines are gathered for up to
//! `COALESCE` and sent as one `stream` message per name, as ipykernel does, so a loop that prints
//! thousands of lines does not flood the client with thousands of messages.

use std::time::Duration;

use jupyter_protocol::{JupyterMessage, StreamContent};
use tokio::sync::{mpsc, oneshot};

use super::Iopub;
use crate::frontend::session::Sink;

const COALESCE: Duration = Duration::from_millis(50);

enum Event {
    Line {
        is_err: bool,
        line: String,
    },
    /// Output from now on belongs to this request.
    Begin(Box<JupyterMessage>),
    /// Send what is buffered now, then answer.
    Flush(oneshot::Sender<()>),
}

#[derive(Clone)]
pub struct Streams(mpsc::UnboundedSender<Event>);

impl Streams {
    pub fn start(iopub: Iopub) -> Streams {
        let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
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
                        let buf = if is_err { &mut err } else { &mut out };
                        buf.push_str(&line);
                        buf.push('\n');
                        if buf.len() > 64 * 1024 {
                            send(&iopub, parent.as_ref(), &mut out, &mut err);
                        }
                    }
                    Some(Event::Begin(p)) => {
                        send(&iopub, parent.as_ref(), &mut out, &mut err);
                        parent = Some(*p);
                    }
                    Some(Event::Flush(done)) => {
                        send(&iopub, parent.as_ref(), &mut out, &mut err);
                        let _ = done.send(());
                    }
                }
            }
        });
        Streams(tx)
    }

    /// Where the session writes the cell process's lines.
    pub fn sink(&self) -> Sink {
        let tx = self.0.clone();
        std::sync::Arc::new(move |is_err, line| {
            let _ = tx.send(Event::Line {
                is_err,
                line: line.to_string(),
            });
        })
    }

    pub fn begin(&self, parent: &JupyterMessage) {
        let _ = self.0.send(Event::Begin(Box::new(parent.clone())));
    }

    /// Waits until every line received so far has gone out.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.0.send(Event::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

fn send(iopub: &Iopub, parent: Option<&JupyterMessage>, out: &mut String, err: &mut String) {
    let Some(parent) = parent else {
        // Output before any request (the engine compiling at start-up) goes to the log.
        for text in [out, err] {
            if !text.is_empty() {
                super::log(text.trim_end());
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
