//! Is this cell ready to run? Used by the REPL's Enter key and by Jupyter's `is_complete_request`
//! (a console sends it on Enter). Brackets, strings and comments decide "not finished yet";
//! Rust's own parser (rust-analyzer's, already built for evcxr) decides "this can never be valid".

use ra_ap_syntax::ast::{self, HasModuleItem};
use ra_ap_syntax::{AstNode, Edition, SourceFile};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completeness {
    Complete,
    /// More lines are needed; the next one is indented by this.
    Incomplete(String),
    /// No continuation can make this valid Rust (a closing bracket with no opener, say).
    Invalid,
}

/// Bracket depth after `src`, read the way rustc's lexer would: brackets inside strings, raw
/// strings, char literals and comments do not count. `Err` on a closing bracket that does not
/// match; `still_open` when a string or block comment runs past the end.
struct Scan {
    depth: usize,
    still_open: bool,
}

fn scan(src: &str) -> Result<Scan, ()> {
    let b = src.as_bytes();
    let mut stack: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                // Block comments nest in Rust.
                let mut level = 1;
                i += 2;
                while level > 0 {
                    match (b.get(i), b.get(i + 1)) {
                        (None, _) => {
                            return Ok(Scan {
                                depth: stack.len(),
                                still_open: true,
                            });
                        }
                        (Some(b'/'), Some(b'*')) => (level, i) = (level + 1, i + 1),
                        (Some(b'*'), Some(b'/')) => (level, i) = (level - 1, i + 1),
                        _ => {}
                    }
                    i += 1;
                }
                continue;
            }
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#'))
                && (i == 0 || !is_ident(b[i - 1])) =>
            {
                // r"…" or r#"…"#: no escapes; ends at a quote followed by as many hashes.
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                let body = i + 2 + hashes;
                match b[body..].windows(close.len()).position(|w| w == close) {
                    Some(at) => i = body + at + close.len(),
                    None => {
                        return Ok(Scan {
                            depth: stack.len(),
                            still_open: true,
                        });
                    }
                }
                continue;
            }
            b'"' => {
                i += 1;
                loop {
                    match b.get(i) {
                        None => {
                            return Ok(Scan {
                                depth: stack.len(),
                                still_open: true,
                            });
                        }
                        Some(b'\\') => i += 2,
                        Some(b'"') => break,
                        _ => i += 1,
                    }
                }
            }
            // A char literal ('x', '\n', '\u{1F600}'), not a lifetime ('a).
            b'\'' => {
                let end = if b.get(i + 1) == Some(&b'\\') {
                    b[i + 2..]
                        .iter()
                        .position(|&c| c == b'\'')
                        .map(|p| i + 2 + p)
                } else {
                    let ch_len = src[i + 1..].chars().next().map_or(0, char::len_utf8);
                    (b.get(i + 1 + ch_len) == Some(&b'\'')).then_some(i + 1 + ch_len)
                };
                if let Some(end) = end {
                    i = end;
                }
            }
            open @ (b'(' | b'[' | b'{') => stack.push(open),
            close @ (b')' | b']' | b'}') => {
                let want = match close {
                    b')' => b'(',
                    b']' => b'[',
                    _ => b'{',
                };
                if stack.pop() != Some(want) {
                    return Err(());
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(Scan {
        depth: stack.len(),
        still_open: false,
    })
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Whether `cell` can run now. Commands (`:mem`) are always complete.
pub fn check(cell: &str) -> Completeness {
    if cell.trim_start().starts_with(':') {
        return Completeness::Complete;
    }
    match scan(cell) {
        Err(()) => Completeness::Invalid,
        Ok(s) if s.still_open => Completeness::Incomplete(String::new()),
        Ok(s) if s.depth > 0 => Completeness::Incomplete("    ".repeat(s.depth)),
        Ok(_) if parses(cell) => Completeness::Complete,
        Ok(_) => Completeness::Invalid,
    }
}

/// The cell with a `;` added after a last `let` that has none (`let y = x.cuda()?`), as people
/// coming from Python write it; evcxr would otherwise report "expected `;`" against its own
/// generated code. Any other cell comes back unchanged.
pub fn forgive(cell: &str) -> std::borrow::Cow<'_, str> {
    const OPEN: &str = "fn __cell() {\n";
    let wrapped = format!("{OPEN}{cell}\n}}");
    let file = SourceFile::parse(&wrapped, Edition::Edition2024).tree();
    let last_let = file.items().find_map(|item| match item {
        ast::Item::Fn(f) => {
            let body = f.body()?.stmt_list()?;
            match (body.statements().last()?, body.tail_expr()) {
                (ast::Stmt::LetStmt(l), None) if l.semicolon_token().is_none() => Some(l),
                _ => None,
            }
        }
        _ => None,
    });
    match last_let {
        Some(l) => {
            let end = usize::from(l.syntax().text_range().end()) - OPEN.len();
            std::borrow::Cow::Owned(format!("{};{}", &cell[..end], &cell[end..]))
        }
        None => std::borrow::Cow::Borrowed(cell),
    }
}

/// Whether the cell parses as a function body (what evcxr makes of it). A missing `;` is not a
/// parse failure here: a cell's last expression has none, and a last `let` without one is
/// forgiven when it runs.
fn parses(cell: &str) -> bool {
    let wrapped = format!("fn __cell() {{\n{cell}\n}}");
    SourceFile::parse(&wrapped, Edition::Edition2024)
        .errors()
        .iter()
        .all(|e| e.to_string().contains("expected SEMICOLON"))
}

#[cfg(test)]
mod tests {
    use super::{Completeness::*, check};

    #[test]
    fn open_brackets_strings_and_comments_wait_for_more() {
        assert_eq!(check("fn f() {"), Incomplete("    ".into()));
        assert_eq!(
            check("let v = vec![\n  vec!["),
            Incomplete("        ".into())
        );
        assert_eq!(check("let s = \"abc"), Incomplete(String::new()));
        assert_eq!(check("let s = r#\"a \" b"), Incomplete(String::new()));
        assert_eq!(
            check("/* a /* nested */ comment"),
            Incomplete(String::new())
        );
    }

    #[test]
    fn brackets_in_literals_and_comments_do_not_count() {
        assert_eq!(check("let s = \"{(\";"), Complete);
        assert_eq!(check("let c = '{';"), Complete);
        assert_eq!(check("fn f<'a>(x: &'a str) -> &'a str { x }"), Complete);
        assert_eq!(check("let x = 1; // {"), Complete);
        assert_eq!(check("let s = r#\"}\"#;"), Complete);
    }

    #[test]
    fn complete_cells_and_commands() {
        assert_eq!(check("let x = 1;"), Complete);
        assert_eq!(check("40 + 2"), Complete);
        assert_eq!(check("let y = x.to(&device)?"), Complete);
        assert_eq!(check(":del x"), Complete);
        assert_eq!(
            check("struct P { x: f32 }\nimpl P { fn f(&self) {} }"),
            Complete
        );
    }

    #[test]
    fn a_last_let_without_semicolon_gets_one() {
        use super::forgive;
        assert_eq!(forgive("let y = x.to(&device)?"), "let y = x.to(&device)?;");
        assert_eq!(
            forgive("let a = 1;\nlet b = a + 1 // two\n"),
            "let a = 1;\nlet b = a + 1; // two\n"
        );
        assert_eq!(forgive("let a = 1;"), "let a = 1;");
        assert_eq!(forgive("a + 1"), "a + 1");
        assert_eq!(forgive(":del x"), ":del x");
    }

    #[test]
    fn cells_no_continuation_can_fix_are_invalid() {
        assert_eq!(check("}"), Invalid);
        assert_eq!(check("let x = (1];"), Invalid);
        assert_eq!(check("let = ;"), Invalid);
    }
}
