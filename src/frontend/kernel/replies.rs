//! The shell channel: requests one at a time, each between `busy` and `idle` on iopub (clients
//! wait for that `idle`), answered from the session (`execute.rs` runs cells).

use jupyter_protocol::{
    CodeMirrorMode, CommInfoReply, CompleteReply, HelpLink, HistoryEntry, HistoryReply,
    HistoryRequest, InspectReply, IsCompleteReply, JupyterMessage, JupyterMessageContent,
    KernelInfoReply, LanguageInfo, Media, MediaType, ReplyStatus, Status,
};
use jupyter_zmq_client::RouterSendConnection;
use tokio::sync::{mpsc, oneshot};

use super::evaluator::{Evaluator, Job};
use super::streams::Streams;
use super::wire::{self, Incoming};
use super::{Iopub, ignore, send_reply};
use crate::frontend::cell_check::{Completeness, check};
use crate::frontend::history::{Entry, History};

pub struct Shell {
    pub reply: RouterSendConnection,
    pub iopub: Iopub,
    pub evaluator: Evaluator,
    pub streams: Streams,
    pub history: History,
    pub execution_count: usize,
    pub requests: mpsc::UnboundedReceiver<Incoming>,
    pub banner: String,
}

impl Shell {
    pub async fn serve(&mut self) {
        while let Some(incoming) = self.requests.recv().await {
            let (message, problem) = match incoming {
                Incoming::Request(m) => (m, None),
                Incoming::Malformed(m, why) => match lenient_history(&m) {
                    Some(fixed) => (fixed, None),
                    None => (m, Some(why)),
                },
                Incoming::Dropped(_) => continue,
            };
            self.iopub.send(Status::busy(), &message);
            match problem {
                Some(why) => {
                    send_reply(
                        &mut self.reply,
                        wire::error_reply(&message, "BadRequest", &why),
                    )
                    .await
                }
                None => self.dispatch(&message).await,
            }
            self.iopub.send(Status::idle(), &message);
        }
    }

    async fn dispatch(&mut self, message: &JupyterMessage) {
        let reply: JupyterMessage = match &message.content {
            JupyterMessageContent::ExecuteRequest(req) => {
                let failed = self.execute(message, req).await;
                if failed && req.stop_on_error {
                    self.abort_queued().await;
                }
                return;
            }
            JupyterMessageContent::KernelInfoRequest(_) => {
                kernel_info(&self.banner).as_child_of(message)
            }
            JupyterMessageContent::IsCompleteRequest(req) => match check(&req.code) {
                Completeness::Complete => IsCompleteReply::complete(),
                Completeness::Incomplete(indent) => IsCompleteReply::incomplete(indent),
                Completeness::Invalid => IsCompleteReply::invalid(),
            }
            .as_child_of(message),
            JupyterMessageContent::CompleteRequest(req) => {
                let pos = byte_offset(&req.code, req.cursor_pos);
                let (done, answer) = oneshot::channel();
                let job = Job::Complete {
                    code: req.code.clone(),
                    pos,
                    done,
                };
                let (start, end, matches) = match self.evaluator.submit(job) {
                    true => answer.await.unwrap_or((pos, pos, Vec::new())),
                    false => (pos, pos, Vec::new()),
                };
                CompleteReply {
                    matches,
                    cursor_start: char_offset(&req.code, start),
                    cursor_end: char_offset(&req.code, end),
                    metadata: Default::default(),
                    status: ReplyStatus::Ok,
                    error: None,
                }
                .as_child_of(message)
            }
            JupyterMessageContent::InspectRequest(req) => {
                let (done, answer) = oneshot::channel();
                let job = Job::Inspect {
                    code: req.code.clone(),
                    pos: byte_offset(&req.code, req.cursor_pos),
                    done,
                };
                let found = match self.evaluator.submit(job) {
                    true => answer.await.ok().flatten(),
                    false => None,
                };
                let data = match &found {
                    Some(i) => {
                        let mut media = vec![MediaType::Plain(i.plain.clone())];
                        media.extend(i.html.clone().map(MediaType::Html));
                        Media::new(media)
                    }
                    None => Media::default(),
                };
                InspectReply {
                    found: found.is_some(),
                    data,
                    metadata: Default::default(),
                    status: ReplyStatus::Ok,
                    error: None,
                }
                .as_child_of(message)
            }
            JupyterMessageContent::HistoryRequest(req) => {
                let output = match req {
                    HistoryRequest::Tail { output, .. }
                    | HistoryRequest::Range { output, .. }
                    | HistoryRequest::Search { output, .. } => *output,
                };
                let entries = match req {
                    HistoryRequest::Tail { n, .. } => self.history.tail((*n).max(0) as usize),
                    HistoryRequest::Range {
                        session,
                        start,
                        stop,
                        ..
                    } => self.history.range(
                        session.unwrap_or(0) as i64,
                        (*start).max(0) as usize,
                        (*stop).max(0) as usize,
                    ),
                    HistoryRequest::Search {
                        pattern, n, unique, ..
                    } => self.history.search(pattern, (*n).max(0) as usize, *unique),
                };
                let entries = entries.into_iter().map(|e| history_entry(e, output));
                HistoryReply::new(entries.collect()).as_child_of(message)
            }
            JupyterMessageContent::CommInfoRequest(_) => CommInfoReply {
                status: ReplyStatus::Ok,
                comms: Default::default(),
                error: None,
            }
            .as_child_of(message),
            _ => {
                ignore(message, "shell");
                return;
            }
        };
        send_reply(&mut self.reply, reply).await;
    }

    /// After a failed cell with `stop_on_error`, the execute requests already waiting are
    /// answered `aborted` without running (as ipykernel does); other requests are served.
    async fn abort_queued(&mut self) {
        tokio::task::yield_now().await;
        while let Ok(incoming) = self.requests.try_recv() {
            let Incoming::Request(message) = incoming else {
                continue;
            };
            self.iopub.send(Status::busy(), &message);
            match &message.content {
                JupyterMessageContent::ExecuteRequest(_) => {
                    let reply = jupyter_protocol::ExecuteReply {
                        status: ReplyStatus::Aborted,
                        execution_count: jupyter_protocol::ExecutionCount::new(
                            self.execution_count,
                        ),
                        payload: Vec::new(),
                        user_expressions: Some(Default::default()),
                        error: None,
                    };
                    send_reply(&mut self.reply, reply.as_child_of(&message)).await;
                }
                _ => Box::pin(self.dispatch(&message)).await,
            }
            self.iopub.send(Status::idle(), &message);
        }
    }
}

fn history_entry(e: Entry, with_output: bool) -> HistoryEntry {
    match with_output {
        true => {
            HistoryEntry::InputOutput(e.session, e.line, (e.input, e.output.unwrap_or_default()))
        }
        false => HistoryEntry::Input(e.session, e.line, e.input),
    }
}

/// jupyter_client leaves out a search's `unique` and `n`, and a tail's `n`, unless they are
/// given; the protocol's defaults (IPython's) fill them in.
fn lenient_history(m: &JupyterMessage) -> Option<JupyterMessage> {
    let JupyterMessageContent::UnknownMessage(u) = &m.content else {
        return None;
    };
    if u.msg_type != "history_request" {
        return None;
    }
    let mut content = u.content.as_object()?.clone();
    for (key, default) in [
        ("output", serde_json::json!(false)),
        ("raw", serde_json::json!(true)),
        ("unique", serde_json::json!(false)),
        ("n", serde_json::json!(10)),
        ("start", serde_json::json!(0)),
        ("stop", serde_json::json!(0)),
        ("pattern", serde_json::json!("*")),
    ] {
        content.entry(key).or_insert(default);
    }
    let request: HistoryRequest = serde_json::from_value(content.into()).ok()?;
    let mut fixed = m.clone();
    fixed.content = JupyterMessageContent::HistoryRequest(request);
    Some(fixed)
}

/// Jupyter counts cursor positions in Unicode code points; evcxr in bytes.
fn byte_offset(code: &str, chars: usize) -> usize {
    code.char_indices()
        .nth(chars)
        .map_or(code.len(), |(i, _)| i)
}

fn char_offset(code: &str, bytes: usize) -> usize {
    code[..bytes.min(code.len())].chars().count()
}

/// `placelab 0.1 · devices: cpu (2 threads), cuda:0 …` and how to get help.
pub fn banner() -> String {
    format!(
        "{}\nRust cells with placelab preloaded. :help lists the commands.",
        crate::frontend::devices_banner(false)
    )
}

pub fn kernel_info(banner: &str) -> KernelInfoReply {
    let link = |text: &str, url: &str| HelpLink {
        text: text.into(),
        url: url.into(),
    };
    KernelInfoReply {
        status: ReplyStatus::Ok,
        protocol_version: "5.3".into(),
        implementation: "placelab".into(),
        implementation_version: env!("CARGO_PKG_VERSION").into(),
        language_info: LanguageInfo {
            name: "rust".into(),
            version: rustc_version(),
            mimetype: Some("text/rust".into()),
            file_extension: Some(".rs".into()),
            pygments_lexer: Some("rust".into()),
            codemirror_mode: Some(CodeMirrorMode::Simple("rust".into())),
            nbconvert_exporter: Some("script".into()),
        },
        banner: banner.into(),
        help_links: vec![
            link("The Rust book", "https://doc.rust-lang.org/book/"),
            link("Rust standard library", "https://doc.rust-lang.org/std/"),
            link(
                "PyTorch: CUDA semantics",
                "https://pytorch.org/docs/stable/notes/cuda.html",
            ),
        ],
        debugger: false,
        error: None,
    }
}

/// The version of the compiler that builds the cells (`rustc --version`), asked once.
fn rustc_version() -> String {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION
        .get_or_init(|| {
            std::process::Command::new("rustc")
                .arg("--version")
                .output()
                .ok()
                .and_then(|o| String::from_utf8(o.stdout).ok())
                .and_then(|s| s.split_whitespace().nth(1).map(str::to_string))
                .unwrap_or_default()
        })
        .clone()
}
