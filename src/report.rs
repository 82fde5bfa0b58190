//! What a cell produced, for every shell: its outputs in order (values, cards, tables, plots,
//! errors of a typed kind), its device memory before and after, its duration.

use std::path::PathBuf;
use std::time::Duration;

use super::strip::MemoryChange;

/// What a cell produced, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// The value of the cell's last expression: plain text (and, for cards, colour and HTML).
    Value {
        plain: String,
        ansi: Option<String>,
        html: Option<String>,
    },
    /// A tensor card the cell printed with `Tensor::show()` (several per cell are fine).
    Card {
        plain: String,
        ansi: String,
        html: Option<String>,
    },
    /// A message from the session itself (a magic's answer).
    Info(String),
    /// A magic's answer that reads better as a table: text, and the same as HTML.
    Table { plain: String, html: String },
    /// A plot (`:plot`): the SVG, and the file it was also written to.
    Plot { svg: String, path: PathBuf },
    /// A compile error, an engine `Err`, a panic, an interrupt or a lost process: its kind,
    /// and the text to show.
    Error { kind: ErrorKind, text: String },
}

/// What kind of failure a cell's error is, decided where it is known (the compiler, the cell
/// process's failure marker, the session's view of that process), never read back from its
/// text. Jupyter's `ename` is its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// rustc rejected the cell; the text is its errors, each starting `error[E…]`.
    Compile,
    /// An engine `Err` the cell returned with `?`, or the session's or a magic's refusal.
    Error,
    /// The cell panicked: the first line says so, the rest is the panic's message.
    Panic,
    /// The user stopped the cell and every variable defined before it was kept.
    Interrupted,
    /// The cell's process ended (after an interrupt's grace, or it exited): variables were lost.
    ProcessEnded,
}

impl ErrorKind {
    /// Jupyter's `ename` for it.
    pub fn ename(self) -> &'static str {
        match self {
            ErrorKind::Compile => "CompileError",
            ErrorKind::Error => "Error",
            ErrorKind::Panic => "Panic",
            ErrorKind::Interrupted => "Interrupted",
            ErrorKind::ProcessEnded => "ProcessEnded",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct CellReport {
    pub outputs: Vec<Output>,
    /// Device memory around the cell, for the strip under it (none for most commands).
    pub memory: Option<MemoryChange>,
    pub duration: Duration,
    /// The user interrupted the cell (however it then ended: stopped, panicked on the
    /// interrupt's error, or its process killed after the grace).
    pub interrupted: bool,
    /// A check in the cell had no prediction written: a notebook folds what the cell showed
    /// behind a "show what ran" element; the REPL shows it as ever.
    pub folded: bool,
}

impl CellReport {
    pub fn info(text: impl Into<String>) -> CellReport {
        CellReport {
            outputs: vec![Output::Info(text.into())],
            ..Default::default()
        }
    }
    /// A refusal by the session or a magic (an `ErrorKind::Error`).
    pub fn error(text: impl Into<String>) -> CellReport {
        CellReport {
            outputs: vec![Output::error(ErrorKind::Error, text)],
            ..Default::default()
        }
    }
    /// A cell interrupted after it was sent and before it began.
    pub fn stopped_before_start() -> CellReport {
        CellReport {
            outputs: vec![Output::error(
                ErrorKind::Interrupted,
                "interrupted by the user before the cell began: none of it ran. Variables \
                 defined before this cell are kept.",
            )],
            interrupted: true,
            ..Default::default()
        }
    }

    pub fn ok(&self) -> bool {
        !self
            .outputs
            .iter()
            .any(|o| matches!(o, Output::Error { .. }))
    }
    /// The first error's kind and the texts of all of them, joined by lines.
    pub fn error_text(&self) -> Option<(ErrorKind, String)> {
        let mut errors = self.outputs.iter().filter_map(|o| match o {
            Output::Error { kind, text } => Some((*kind, text.as_str())),
            _ => None,
        });
        let (kind, first) = errors.next()?;
        let rest: Vec<&str> = errors.map(|(_, t)| t).collect();
        Some((kind, [vec![first], rest].concat().join("\n")))
    }
}

impl ErrorKind {
    /// `text` as the shells show it: rustc's errors start with their own `error[E…]`, the others
    /// get `error: ` (its continuation lines indented by `indent`).
    pub fn headed(self, text: &str, indent: &str) -> String {
        let body = text.replace('\n', &format!("\n{indent}"));
        match self {
            ErrorKind::Compile => body,
            _ => format!("error: {body}"),
        }
    }
}

impl Output {
    pub fn error(kind: ErrorKind, text: impl Into<String>) -> Output {
        Output::Error {
            kind,
            text: text.into(),
        }
    }
}
