//! What rustc's errors about a cell say to the person who wrote it: the user's line and column,
//! the offending line with its span marked, rustc's notes and help, and evcxr's generated names
//! said as what they stand for; and what an error from the build itself means (crates from
//! different builds, a full disk, cargo stopped).

use evcxr::CompilationError;

/// rustc's error when a crate's dependencies are not the builds it was compiled against: proc
/// macros from one build beside the crates compiled with another's.
pub(super) fn crates_do_not_fit(e: &evcxr::Error) -> bool {
    e.to_string().contains("can't find crate for `")
}

/// A compiler's or cargo's error that says a write failed for lack of space (ENOSPC).
pub(super) fn is_disk_full(said: &str) -> bool {
    said.contains("No space left on device") || said.contains("os error 28")
}

/// cargo's error when it could not get the engine's dependencies: no network (or cargo told to
/// stay offline) and the crates not in its cache yet.
pub(super) fn cannot_fetch_dependencies(said: &str) -> bool {
    said.contains("failed to get `")
        || said.contains("Unable to update registry")
        || said.contains("failed to download")
        || (said.contains("no matching package named") && said.contains("offline"))
}

/// evcxr's error when cargo failed with no compiler error to show: cargo was ended (a Ctrl-C at
/// the terminal reaches it directly, as it shares the terminal's process group; an interrupt
/// kills it), not refused. evcxr then reports what rustc had printed by then: nothing, or only
/// warnings (a cell that ends in `loop { … }` leaves evcxr's code after it unreachable).
pub(super) fn cargo_ended_without_an_error(e: &evcxr::Error) -> bool {
    match e {
        evcxr::Error::Message(m) => m.starts_with("Compilation failed, but no parsable errors"),
        // "error", or "error: internal compiler error".
        evcxr::Error::CompilationErrors(said) => {
            !said.iter().any(|d| d.level().starts_with("error"))
        }
        _ => false,
    }
}

/// All of a cell's compile errors, one after another.
pub fn render(code: &str, errors: &[CompilationError]) -> String {
    scrub_generated_names(
        &errors
            .iter()
            .map(|err| render_one(code, err))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Names evcxr generates around a cell (`evcxr_variable_store`, `evcxr_internal_runtime`, …)
/// mean nothing to the person who wrote the cell: say what they stand for.
pub fn scrub_generated_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("evcxr_") {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push_str(match &tail[..len] {
            "evcxr_variable_store" => "the session's variable store",
            _ => "the session's generated code",
        });
        rest = &tail[len..];
    }
    out.push_str(rest);
    out
}

/// A rustc error with the user's line and column, the offending line, and rustc's help.
fn render_one(code: &str, err: &CompilationError) -> String {
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
    // rustc's notes (a `#[must_use]` reason, say) reach us only in its rendered text; the
    // ones about which lint level applies say nothing to a learner.
    for note in err
        .rendered()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("= note: "))
    {
        if !note.contains("#[") && !note.contains("on the command line") {
            out.push_str(&format!("\n  = note: {note}"));
        }
    }
    // "use `let _ = ...`" would teach the opposite of what an unused tensor means in a cell.
    let helps = match err.code() {
        Some("unused_must_use") => Vec::new(),
        _ => err.help(),
    };
    for h in helps {
        // The suggested replacement follows a blank line; the sentence says it.
        let first = h.split("\n\n").next().unwrap_or(&h);
        out.push_str(&format!("\n  = help: {first}"));
    }
    if let Some(hint) = err.evcxr_extra_hint() {
        out.push_str(&format!("\n  = note: {hint}"));
    }
    out
}
