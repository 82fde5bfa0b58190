//! `execute_request`: `execute_input`, the cell's streams while it runs, its outputs (cards as
//! HTML with `text/plain` beside them, plots as SVG, one `error` message on failure), the memory
//! strip under it — live while a long cell runs — and the reply.

use std::collections::HashMap;

use jupyter_protocol::{
    DisplayData, ErrorOutput, ExecuteInput, ExecuteReply, ExecuteRequest, ExecuteResult,
    ExecutionCount, ExpressionResult, JupyterMessage, Media, MediaType, Payload, ReplyError,
    ReplyStatus, StreamContent, Transient,
};
use tokio::sync::oneshot;

use super::folded::folded;
use super::iopub::{Iopub, media_of, plain_and_html};
use super::live_strip::Strip;
use super::streams::Streams;
use super::wire::stamp;
use crate::engine;
use crate::evaluator::{Evaluator, Job};
use crate::history::History;
use crate::interrupter::CellRequest;
use crate::magics::is_exit;
use crate::report::{CellReport, ErrorKind, Output};
use crate::strip::MemoryChange;

/// What running cells needs, owned by the shell channel's task.
pub struct Executor {
    pub iopub: Iopub,
    pub evaluator: Evaluator,
    pub streams: Streams,
    pub history: History,
    pub execution_count: usize,
}

impl Executor {
    /// The cells' side of a kernel on `iopub`: its streams, the evaluator starting the session
    /// (on its own thread), the kernel's history.
    pub fn start(iopub: Iopub, prepared: crate::session::Prepared) -> Executor {
        let streams = Streams::start(iopub.clone());
        let evaluator = Evaluator::spawn(
            prepared,
            streams.sink(),
            Some(streams.clear_sink()),
            crate::evaluator::Analyzer::OnDemand,
        );
        Executor {
            iopub,
            evaluator,
            streams,
            history: history(),
            execution_count: 0,
        }
    }

    /// Runs one execute request and returns its reply.
    pub async fn execute(
        &mut self,
        message: &JupyterMessage,
        req: &ExecuteRequest,
    ) -> ExecuteReply {
        let silent = req.silent;
        if req.store_history && !silent {
            self.execution_count += 1;
        }
        let count = ExecutionCount::new(self.execution_count);
        // From the moment the client can see the cell begin (its `execute_input`), an interrupt
        // stops it, even one that reaches the evaluator before the cell does; but not one its
        // client sent before this request (for a cell that has ended).
        let request = CellRequest::now(Some(stamp(message)));
        if !is_exit(&req.code) {
            self.evaluator.cell_asked(&request);
        }
        if !silent {
            let input = ExecuteInput {
                code: req.code.clone(),
                execution_count: count,
            };
            self.iopub.send(input, message);
        }
        // `exit` and `quit`, as in IPython: the client decides (a console leaves).
        if is_exit(&req.code) {
            let mut reply = self.reply(count, None, HashMap::new());
            reply.payload = vec![Payload::AskExit { keepkernel: false }];
            return reply;
        }
        if !self.evaluator.is_ready() && !silent {
            self.iopub
                .send(StreamContent::stdout(still_starting()), message);
        }
        self.streams.begin(message);
        let strip = Strip::new(self.iopub.clone(), message, silent, self.streams.cleared());
        let report = self.run(&req.code, request.clone(), strip.live()).await;
        self.streams.flush().await;
        // One error for the iopub `error` message and the reply.
        let error = report
            .error_text()
            .map(|(kind, text)| reply_error(kind, &text));
        // A check with no prediction written: what the cell showed goes behind a fold.
        let printed = (report.folded && !silent)
            .then(|| self.streams.printed())
            .flatten();
        if let Some(printed) = &printed {
            self.streams.clear(true).await;
            self.iopub
                .send(DisplayData::new(folded(printed, &report.outputs)), message);
            publish_error(&self.iopub, message, error.as_ref());
        } else if !silent {
            publish(&self.iopub, message, count, &report, error.as_ref());
        }
        if !silent {
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
                let asked = CellRequest::now(Some(stamp(message)));
                user_expressions.insert(name.clone(), self.evaluate(expr, asked).await);
            }
        }
        self.reply(count, error, user_expressions)
    }

    /// An `execute_reply`: `ok`, or `error` with its error.
    fn reply(
        &self,
        count: ExecutionCount,
        error: Option<ReplyError>,
        user_expressions: HashMap<String, ExpressionResult>,
    ) -> ExecuteReply {
        ExecuteReply {
            status: match error {
                Some(_) => ReplyStatus::Error,
                None => ReplyStatus::Ok,
            },
            execution_count: count,
            payload: Vec::new(),
            user_expressions: Some(user_expressions),
            error: error.map(Box::new),
        }
    }

    /// The reply to an execute request that was not run, after a failed cell with
    /// `stop_on_error` (as ipykernel does).
    pub fn aborted(&self) -> ExecuteReply {
        let mut reply = self.reply(
            ExecutionCount::new(self.execution_count),
            None,
            HashMap::new(),
        );
        reply.status = ReplyStatus::Aborted;
        reply
    }

    async fn run(
        &self,
        code: &str,
        request: CellRequest,
        progress: Box<dyn FnMut(MemoryChange) + Send>,
    ) -> CellReport {
        let (done, answer) = oneshot::channel();
        let job = Job::Execute {
            code: code.to_string(),
            request,
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
    async fn evaluate(&self, expr: &str, request: CellRequest) -> ExpressionResult {
        let report = self.run(expr, request, Box::new(|_| {})).await;
        for o in report.outputs {
            match o {
                Output::Value { plain, html, .. } => {
                    return ExpressionResult::Ok {
                        data: plain_and_html(&plain, html.as_deref()),
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

/// The kernel's history of cells, also of notebooks run by `run-notebook`.
fn history() -> History {
    History::open(match std::env::var_os("PLACELAB_HISTORY") {
        Some(path) => path.into(),
        None => crate::setup::cache_dir().join("kernel-history.jsonl"),
    })
}

/// Said before a cell that waits for the session to start.
fn still_starting() -> &'static str {
    if engine::is_built(&engine::dir()) {
        "(the Rust evaluator is still starting: a few seconds)\n"
    } else {
        "(the Rust evaluator is still starting: the first start on a machine builds the \
         engine, a few minutes; later starts take seconds)\n"
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
    for o in &report.outputs {
        match (o, media_of(o)) {
            (Output::Value { .. }, Some(data)) => {
                let result = ExecuteResult {
                    execution_count: count,
                    data,
                    metadata: Default::default(),
                    // Never null: the schema wants an object.
                    transient: Some(Transient::default()),
                };
                iopub.send(result, parent);
            }
            (_, Some(media)) => iopub.send(DisplayData::new(media), parent),
            (Output::Info(text), None) => {
                iopub.send(StreamContent::stdout(&format!("{text}\n")), parent)
            }
            (_, None) => {}
        }
    }
    publish_error(iopub, parent, error);
}

fn publish_error(iopub: &Iopub, parent: &JupyterMessage, error: Option<&ReplyError>) {
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
