//! The shell channel's answers that are not a cell: `is_complete`, completion, inspection,
//! history, `comm_info` and `kernel_info`, each built from its request.

use jupyter_protocol::{
    CodeMirrorMode, CommInfoReply, CompleteReply, CompleteRequest, HelpLink, HistoryEntry,
    HistoryReply, HistoryRequest, InspectReply, InspectRequest, IsCompleteReply, JupyterMessage,
    JupyterMessageContent, KernelInfoReply, LanguageInfo, Media, ReplyStatus,
};
use tokio::sync::oneshot;

use super::iopub::plain_and_html;
use crate::cell_check::{Completeness, check};
use crate::evaluator::{Evaluator, Job};
use crate::history::{Entry, History};

pub fn is_complete(code: &str) -> IsCompleteReply {
    match check(code) {
        Completeness::Complete => IsCompleteReply::complete(),
        Completeness::Incomplete(indent) => IsCompleteReply::incomplete(indent),
        Completeness::Invalid => IsCompleteReply::invalid(),
    }
}

pub async fn complete(evaluator: &Evaluator, req: &CompleteRequest) -> CompleteReply {
    let pos = byte_offset(&req.code, req.cursor_pos);
    let (done, answer) = oneshot::channel();
    let job = Job::Complete {
        code: req.code.clone(),
        pos,
        done,
    };
    let (start, end, matches) = match evaluator.submit(job) {
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
}

pub async fn inspect(evaluator: &Evaluator, req: &InspectRequest) -> InspectReply {
    let (done, answer) = oneshot::channel();
    let job = Job::Inspect {
        code: req.code.clone(),
        pos: byte_offset(&req.code, req.cursor_pos),
        done,
    };
    let found = match evaluator.submit(job) {
        true => answer.await.ok().flatten(),
        false => None,
    };
    InspectReply {
        found: found.is_some(),
        data: found.map_or_else(Media::default, |i| {
            plain_and_html(&i.plain, i.html.as_deref())
        }),
        metadata: Default::default(),
        status: ReplyStatus::Ok,
        error: None,
    }
}

pub fn history(history: &History, req: &HistoryRequest) -> HistoryReply {
    let output = match req {
        HistoryRequest::Tail { output, .. }
        | HistoryRequest::Range { output, .. }
        | HistoryRequest::Search { output, .. } => *output,
    };
    let entries = match req {
        HistoryRequest::Tail { n, .. } => history.tail((*n).max(0) as usize),
        HistoryRequest::Range {
            session,
            start,
            stop,
            ..
        } => history.range(
            session.unwrap_or(0) as i64,
            (*start).max(0) as usize,
            (*stop).max(0) as usize,
        ),
        HistoryRequest::Search {
            pattern, n, unique, ..
        } => history.search(pattern, (*n).max(0) as usize, *unique),
    };
    let entries = entries.into_iter().map(|e| history_entry(e, output));
    HistoryReply::new(entries.collect())
}

pub fn comm_info() -> CommInfoReply {
    CommInfoReply {
        status: ReplyStatus::Ok,
        comms: Default::default(),
        error: None,
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
pub fn lenient_history(m: &JupyterMessage) -> Option<JupyterMessage> {
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

/// The version and how to get help. Devices are `:devices`' to list: the cell process knows
/// them, and the kernel's process never loads CUDA.
pub fn banner() -> String {
    format!(
        "placelab {}\nRust cells with placelab preloaded. :devices lists the devices, :help the \
         commands.",
        env!("CARGO_PKG_VERSION")
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
