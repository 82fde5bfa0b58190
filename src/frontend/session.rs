//! One interactive session: an evcxr context with the engine preloaded, the side channel to the
//! cell process, and per-cell reports (outputs, errors, memory lines). The REPL and script
//! runner are thin shells over it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evcxr::{CommandContext, CompilationError, Error as EvcxrError};

use super::probe_client::{ProbeClient, Snapshot, memory_lines};
use super::setup;

/// What a cell produced, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// The value of the cell's last expression: plain text (and, for cards, colour and HTML).
    Value {
        plain: String,
        ansi: Option<String>,
        html: Option<String>,
    },
    /// A message from the session itself (a magic's answer).
    Info(String),
    /// A compile error, an engine `Err`, a panic or a lost process.
    Error(String),
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct CellReport {
    pub outputs: Vec<Output>,
    /// The memory lines shown under the cell (one per device in use, then transfers).
    pub memory: Vec<String>,
    pub duration: Duration,
}

impl CellReport {
    pub fn info(text: impl Into<String>) -> CellReport {
        CellReport {
            outputs: vec![Output::Info(text.into())],
            ..Default::default()
        }
    }
    pub fn error(text: impl Into<String>) -> CellReport {
        CellReport {
            outputs: vec![Output::Error(text.into())],
            ..Default::default()
        }
    }
    pub fn ok(&self) -> bool {
        !self.outputs.iter().any(|o| matches!(o, Output::Error(_)))
    }
}

/// Where streamed stdout/stderr lines of cells go while they run.
pub type Sink = Arc<dyn Fn(bool, &str) + Send + Sync>;

/// Paths and environment a session needs, prepared in `main` before any thread starts
/// (`std::env::set_var` is not safe once threads run).
pub struct Prepared {
    pub workdir: PathBuf,
    pub probe: PathBuf,
    _lock: std::fs::File,
}

/// Claims a compile directory and sets evcxr's environment. Call before starting threads.
pub fn prepare() -> Result<Prepared, String> {
    let root = setup::cache_dir();
    let config = setup::write_config(&root).map_err(|e| {
        format!(
            "cannot write the session config under {}: {e}",
            root.display()
        )
    })?;
    let (workdir, lock) = setup::claim_compile_dir(&root.join("sessions"))
        .map_err(|e| format!("cannot claim a compile directory: {e}"))?;
    std::fs::create_dir_all(&workdir).map_err(|e| e.to_string())?;
    let probe = root.join(format!("probe-{}.sock", std::process::id()));
    // SAFETY: called from `main` before any other thread exists.
    unsafe {
        std::env::set_var("EVCXR_CONFIG_DIR", &config);
        std::env::set_var("EVCXR_TMPDIR", &workdir);
        std::env::set_var(crate::probe::ENV, &probe);
    }
    Ok(Prepared {
        workdir,
        probe,
        _lock: lock,
    })
}

pub struct Session {
    pub(super) ctx: CommandContext,
    pub(super) probe: ProbeClient,
    pub(super) last_seq: u64,
    /// Cards the running cell showed with `Tensor::show()`, in order.
    shown_cards: Arc<Mutex<Vec<Output>>>,
    /// Device memory after each code cell, for `:plot memory`.
    pub(super) history: Vec<Snapshot>,
    prepared: Prepared,
}

/// The preload: the engine as a dependency (without the front end) and its prelude.
fn preload_code() -> String {
    format!(
        ":dep placelab = {{ path = {:?}, default-features = false }}\nuse placelab::prelude::*;\nplacelab::probe::serve_from_env();",
        env!("CARGO_MANIFEST_DIR")
    )
}

impl Session {
    /// Starts evcxr and compiles the engine into it (minutes the first time on a machine,
    /// seconds after), streaming the cell process's output to `sink`.
    pub fn start(prepared: Prepared, sink: Sink) -> Result<Session, String> {
        let shown_cards: Arc<Mutex<Vec<Output>>> = Arc::default();
        let (ctx, outputs) = CommandContext::new()
            .map_err(|e| format!("could not start the Rust evaluator: {e}"))?;
        for (is_err, rx) in [(false, outputs.stdout), (true, outputs.stderr)] {
            let (sink, shown_cards) = (sink.clone(), shown_cards.clone());
            std::thread::spawn(move || {
                let mut in_backtrace = false;
                // Lines between `show()`'s markers are a card, not output to stream.
                let mut card: Option<Vec<String>> = None;
                for line in rx {
                    if !is_err {
                        match (line.as_str(), card.as_mut()) {
                            (crate::display::CARD_BEGIN, _) => card = Some(Vec::new()),
                            (crate::display::CARD_END, Some(lines)) => {
                                let text = lines.join("\n");
                                let (ansi, plain) = match text
                                    .split_once(crate::display::CARD_PLAIN)
                                {
                                    Some((a, p)) => {
                                        (Some(a.trim_end().to_string()), p.trim_start().to_string())
                                    }
                                    None => (None, text),
                                };
                                shown_cards.lock().unwrap_or_else(|e| e.into_inner()).push(
                                    Output::Value {
                                        plain,
                                        ansi,
                                        html: None,
                                    },
                                );
                                card = None;
                            }
                            (_, Some(lines)) => lines.push(line),
                            _ => sink(false, &line),
                        }
                        continue;
                    }
                    if let Some(shown) = filter_stderr(is_err, &line, &mut in_backtrace) {
                        sink(is_err, &shown);
                    }
                }
            });
        }
        let probe = ProbeClient {
            path: prepared.probe.clone(),
        };
        let mut s = Session {
            ctx,
            probe,
            last_seq: 0,
            shown_cards,
            history: Vec::new(),
            prepared,
        };
        let cache = setup::cache_dir();
        super::progress::while_compiling(&cache, || s.ctx.execute(&preload_code()))
            .map_err(|e| format!("could not load the placelab engine into the evaluator: {e}"))?;
        Ok(s)
    }

    pub fn workdir(&self) -> &std::path::Path {
        &self.prepared.workdir
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        self.probe.snapshot(self.last_seq).unwrap_or_default()
    }

    /// Runs one cell: a magic (`:mem`, `:del x`…) or Rust code. Never fails: every problem is an
    /// `Output::Error` in the report, and the session stays usable.
    pub fn execute(&mut self, cell: &str) -> CellReport {
        let start = Instant::now();
        let trimmed = cell.trim();
        if trimmed.is_empty() {
            return CellReport::default();
        }
        if let Some(report) = super::magics::dispatch(self, trimmed) {
            return CellReport {
                duration: start.elapsed(),
                ..report
            };
        }
        let mut report = self.run_code(cell);
        report.duration = start.elapsed();
        report
    }

    /// Rust code (or an evcxr command), with the memory lines of what it did.
    pub(super) fn run_code(&mut self, code: &str) -> CellReport {
        let before = self.snapshot();
        let mut report = CellReport::default();
        let result = self.ctx.execute(code);
        // evcxr drains the cell's stdout before returning, so every shown card is in.
        report
            .outputs
            .append(&mut self.shown_cards.lock().unwrap_or_else(|e| e.into_inner()));
        match result {
            Ok(out) => {
                let get = |k: &str| out.content_by_mime_type.get(k).cloned();
                if let Some(plain) = get("text/plain") {
                    report.outputs.push(Output::Value {
                        plain,
                        ansi: get("text/x-ansi"),
                        html: get("text/html"),
                    });
                }
            }
            Err(e) => report
                .outputs
                .push(Output::Error(self.describe_error(code, e))),
        }
        let after = self.snapshot();
        report.memory = memory_lines(&before, &after);
        self.last_seq = self.last_seq.max(after.last_seq);
        self.history.push(after);
        report
    }

    fn describe_error(&mut self, code: &str, e: EvcxrError) -> String {
        match e {
            EvcxrError::CompilationErrors(errors) => errors
                .iter()
                .map(|err| render_compile_error(code, err))
                .collect::<Vec<_>>()
                .join("\n"),
            EvcxrError::SubprocessTerminated(why) => {
                // The process that ran cells is gone, and every variable with it; evcxr restarts
                // it on the next cell. Re-open the side channel there.
                let _ = self.ctx.execute("placelab::probe::serve_from_env();");
                self.last_seq = 0;
                format!(
                    "the cell's process ended ({why}): every variable was lost and device memory freed. \
                     The session restarted; `use` lines and dependencies are kept."
                )
            }
            EvcxrError::TypeRedefinedVariablesLost(vars) => {
                format!(
                    "a type was redefined, so these variables were dropped: {}",
                    vars.join(", ")
                )
            }
            EvcxrError::Message(m) => m,
        }
    }
}

/// Shortens what a panicking cell prints: evcxr forces backtraces on, and their frames point
/// into generated code. The panic's own message is kept, under a line that says what happened.
fn filter_stderr(is_err: bool, line: &str, in_backtrace: &mut bool) -> Option<String> {
    if !is_err {
        return Some(line.to_string());
    }
    if *in_backtrace {
        if line.starts_with("note: Some details are omitted") {
            *in_backtrace = false;
        }
        return None;
    }
    if line.starts_with("stack backtrace:") {
        *in_backtrace = true;
        return None;
    }
    if line.starts_with("thread '") && line.contains("panicked at") {
        return Some("panic in the cell (variables defined before it are kept):".into());
    }
    Some(line.to_string())
}

/// A rustc error with the user's line and column, the offending line, and rustc's help.
fn render_compile_error(code: &str, err: &CompilationError) -> String {
    let mut out = match err.code() {
        Some(c) => format!("error[{c}]: {}", err.message()),
        None => format!("error: {}", err.message()),
    };
    let lines: Vec<&str> = code.lines().collect();
    for m in err.spanned_messages() {
        let Some(span) = &m.span else { continue };
        let line = lines
            .get(span.start_line.saturating_sub(1))
            .copied()
            .unwrap_or("");
        out.push_str(&format!(
            "\n --> cell:{}:{}\n  | {line}",
            span.start_line, span.start_column
        ));
        let width = if span.end_line == span.start_line {
            span.end_column.saturating_sub(span.start_column).max(1)
        } else {
            1
        };
        out.push_str(&format!(
            "\n  | {}{} {}",
            " ".repeat(span.start_column.saturating_sub(1)),
            if m.is_primary { "^" } else { "-" }.repeat(width),
            m.label
        ));
    }
    for h in err.help() {
        out.push_str(&format!("\n  = help: {h}"));
    }
    if let Some(hint) = err.evcxr_extra_hint() {
        out.push_str(&format!("\n  = note: {hint}"));
    }
    out
}
