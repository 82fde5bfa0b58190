//! `execute_request`: `execute_input`, the cell's streams while it runs, its outputs (cards as
//! HTML with `text/plain` beside them, plots as SVG, one `error` message on failure), the memory
//! strip under it — live while a long cell runs — and the reply.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use jupyter_protocol::{
    DisplayData, ErrorOutput, ExecuteInput, ExecuteReply, ExecuteRequest, ExecuteResult,
    ExecutionCount, ExpressionResult, JupyterMessage, Media, MediaType, Payload, ReplyError,
    ReplyStatus, StreamContent, Transient, UpdateDisplayData,
};
use tokio::sync::oneshot;

use super::Iopub;
use super::evaluator::Job;
use super::replies::Shell;
use super::send_reply;
use crate::frontend::engine;
use crate::frontend::report::{CellReport, ErrorKind, Output};
use crate::frontend::strip::MemoryChange;

impl Shell {
    /// Runs one execute request; returns whether it failed.
    pub async fn execute(&mut self, message: &JupyterMessage, req: &ExecuteRequest) -> bool {
        let silent = req.silent;
        if req.store_history && !silent {
            self.execution_count += 1;
        }
        let count = ExecutionCount::new(self.execution_count);
        if !silent {
            let input = ExecuteInput {
                code: req.code.clone(),
                execution_count: count,
            };
            self.iopub.send(input, message);
        }
        // `exit` and `quit`, as in IPython: the client decides (a console leaves).
        if crate::frontend::magics::is_exit(&req.code) {
            let reply = ExecuteReply {
                status: ReplyStatus::Ok,
                execution_count: count,
                payload: vec![Payload::AskExit { keepkernel: false }],
                user_expressions: Some(HashMap::new()),
                error: None,
            };
            send_reply(&mut self.reply, reply.as_child_of(message)).await;
            return false;
        }
        if !self.evaluator.is_ready() && !silent {
            let wait = if engine::is_built(&engine::dir()) {
                "(the Rust evaluator is still starting: a few seconds)\n"
            } else {
                "(the Rust evaluator is still starting: the first start on a machine builds the \
                 engine, a few minutes; later starts take seconds)\n"
            };
            self.iopub.send(StreamContent::stdout(wait), message);
        }

        self.streams.begin(message);
        let strip = Strip::new(self.iopub.clone(), message, silent, self.streams.cleared());
        let report = self.run(&req.code, strip.live()).await;
        self.streams.flush().await;
        // One error for the iopub `error` message and the reply.
        let error = report
            .error_text()
            .map(|(kind, text)| reply_error(kind, &text));
        if !silent {
            publish(&self.iopub, message, count, &report, error.as_ref());
            // Under every cell that ran, what each device in use holds; under a failed cell only
            // if it changed something (its error is its output).
            let strip_change = report
                .memory
                .as_ref()
                .filter(|m| !m.is_empty() && (error.is_none() || m.changed()));
            strip.finish(strip_change);
        }
        if req.store_history && !silent {
            self.history
                .add(self.execution_count, &req.code, result_text(&report));
        }
        let mut user_expressions = HashMap::new();
        if error.is_none() {
            for (name, expr) in req.user_expressions.iter().flatten() {
                user_expressions.insert(name.clone(), self.evaluate(expr).await);
            }
        }
        let reply = ExecuteReply {
            status: if error.is_some() {
                ReplyStatus::Error
            } else {
                ReplyStatus::Ok
            },
            execution_count: count,
            payload: Vec::new(),
            user_expressions: Some(user_expressions),
            error: error.map(Box::new),
        };
        let failed = reply.error.is_some();
        send_reply(&mut self.reply, reply.as_child_of(message)).await;
        failed
    }

    async fn run(&self, code: &str, progress: Box<dyn FnMut(MemoryChange) + Send>) -> CellReport {
        let (done, answer) = oneshot::channel();
        let job = Job::Execute {
            code: code.to_string(),
            progress,
            done,
        };
        if !self.evaluator.submit(job) {
            return CellReport::error("the Rust evaluator has stopped; restart the kernel");
        }
        answer.await.unwrap_or_else(|_| {
            CellReport::error(
                "the Rust evaluator stopped while running this cell; restart the kernel",
            )
        })
    }

    /// A `user_expressions` entry: the expression's value as text (and HTML for cards).
    async fn evaluate(&self, expr: &str) -> ExpressionResult {
        let report = self.run(expr, Box::new(|_| {})).await;
        for o in report.outputs {
            match o {
                Output::Value { plain, html, .. } => {
                    let mut media = vec![MediaType::Plain(plain)];
                    media.extend(html.map(MediaType::Html));
                    return ExpressionResult::Ok {
                        data: Media::new(media),
                        metadata: Default::default(),
                    };
                }
                Output::Error { kind, text } => {
                    let r = reply_error(kind, &text);
                    return ExpressionResult::Error {
                        ename: r.ename,
                        evalue: r.evalue,
                        traceback: r.traceback,
                    };
                }
                _ => {}
            }
        }
        ExpressionResult::Ok {
            data: Media::new(vec![MediaType::Plain("()".into())]),
            metadata: Default::default(),
        }
    }
}

/// The cell's value as text, kept in the history for `history_request`s with `output`.
fn result_text(report: &CellReport) -> Option<String> {
    report.outputs.iter().find_map(|o| match o {
        Output::Value { plain, .. } => Some(plain.clone()),
        _ => None,
    })
}

/// Sends a cell's outputs in order: its value as `execute_result`, cards, tables and plots as
/// `display_data`, the session's messages as stdout, and its errors as one `error` (`error`).
fn publish(
    iopub: &Iopub,
    parent: &JupyterMessage,
    count: ExecutionCount,
    report: &CellReport,
    error: Option<&ReplyError>,
) {
    let display = |media: Vec<MediaType>| DisplayData::new(Media::new(media));
    for o in &report.outputs {
        match o {
            Output::Value { plain, html, .. } => {
                let mut media = vec![MediaType::Plain(plain.clone())];
                media.extend(html.clone().map(MediaType::Html));
                let result = ExecuteResult {
                    execution_count: count,
                    data: Media::new(media),
                    metadata: Default::default(),
                    // Never null: the schema wants an object.
                    transient: Some(Transient::default()),
                };
                iopub.send(result, parent);
            }
            Output::Card { plain, html, .. } => {
                let mut media = vec![MediaType::Plain(plain.clone())];
                media.extend(html.clone().map(MediaType::Html));
                iopub.send(display(media), parent);
            }
            Output::Table { plain, html } => iopub.send(
                display(vec![
                    MediaType::Plain(plain.clone()),
                    MediaType::Html(html.clone()),
                ]),
                parent,
            ),
            Output::Plot { svg, path } => iopub.send(
                display(vec![
                    MediaType::Plain(format!("plot (also written to {})", path.display())),
                    MediaType::Svg(svg.clone()),
                ]),
                parent,
            ),
            Output::Info(text) => iopub.send(StreamContent::stdout(&format!("{text}\n")), parent),
            Output::Error { .. } => {}
        }
    }
    if let Some(e) = error {
        let error = ErrorOutput {
            ename: e.ename.clone(),
            evalue: e.evalue.clone(),
            traceback: e.traceback.clone(),
        };
        iopub.send(error, parent);
    }
}

/// A cell's error as Jupyter wants it: `ename` its kind, `evalue` its first line (a panic's: its
/// message, the lines after "panic in the cell …:"), the traceback every line (shown red).
fn reply_error(kind: ErrorKind, text: &str) -> ReplyError {
    let evalue = match kind {
        ErrorKind::Panic => text.lines().skip(1).collect::<Vec<_>>().join("\n"),
        _ => text.lines().next().unwrap_or_default().to_string(),
    };
    let body = kind.headed(text, "");
    ReplyError {
        ename: kind.ename().into(),
        evalue,
        traceback: body
            .lines()
            .map(|l| format!("\x1b[31m{l}\x1b[0m"))
            .collect(),
    }
}

/// The memory strip of one cell: shown live (one `display_data`, then updates in place) while
/// the cell runs, and its final state when it ends.
struct Strip {
    iopub: Iopub,
    parent: JupyterMessage,
    display_id: String,
    silent: bool,
    /// Whether the live strip is already on the page (then the end updates it in place).
    shown: Arc<Mutex<bool>>,
    /// Raised when the cell's `clear_output` took the strip off the page.
    cleared: Arc<AtomicBool>,
}

impl Strip {
    fn new(iopub: Iopub, parent: &JupyterMessage, silent: bool, cleared: Arc<AtomicBool>) -> Strip {
        Strip {
            iopub,
            parent: parent.clone(),
            display_id: format!("placelab-memory-{}", parent.header.msg_id),
            silent,
            shown: Arc::default(),
            cleared,
        }
    }

    fn media(change: &MemoryChange, running: bool) -> Media {
        let mut lines = change.lines();
        let mut html = change.html();
        if running {
            lines.insert(0, "── running…".into());
            html = html.replacen(
                "<table",
                "<div style=\"color:#b35900\">running…</div><table",
                1,
            );
        }
        Media::new(vec![
            MediaType::Plain(lines.join("\n")),
            MediaType::Html(html),
        ])
    }

    fn show(&self, change: &MemoryChange, running: bool) {
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        if self.cleared.swap(false, Ordering::AcqRel) {
            *shown = false;
        }
        let transient = Transient {
            display_id: Some(self.display_id.clone()),
        };
        let media = Self::media(change, running);
        if *shown {
            let update = UpdateDisplayData {
                data: media,
                metadata: Default::default(),
                transient,
            };
            self.iopub.send(update, &self.parent);
        } else {
            let mut display = DisplayData::new(media);
            display.transient = Some(transient);
            self.iopub.send(display, &self.parent);
            *shown = true;
        }
    }

    /// The callback the evaluator calls while the cell runs.
    fn live(&self) -> Box<dyn FnMut(MemoryChange) + Send> {
        if self.silent {
            return Box::new(|_| {});
        }
        let strip = Strip {
            iopub: self.iopub.clone(),
            parent: self.parent.clone(),
            display_id: self.display_id.clone(),
            silent: false,
            shown: self.shown.clone(),
            cleared: self.cleared.clone(),
        };
        // Shown once the cell's memory moves: a cell still compiling has nothing to watch yet.
        Box::new(move |change| {
            if change.changed() {
                strip.show(&change, true)
            }
        })
    }

    fn finish(&self, change: Option<&MemoryChange>) {
        if let Some(c) = change {
            self.show(c, false);
        }
    }
}
