//! Is this cell ready to run? Used by the REPL's Enter key and by Jupyter's `is_complete_request`
//! (a console sends it on Enter). Brackets, strings and comments decide "not finished yet";
//! Rust's own parser (rust-analyzer's, already built for evcxr) decides "this can never be valid".
//! Both read the cell through rust-analyzer: its lexer is rustc's, so the tokens are the ones the
//! compiler will see.

use ra_ap_syntax::ast::{self, HasModuleItem};
use ra_ap_syntax::{
    AstNode, Edition, NodeOrToken, Parse, SourceFile, SyntaxKind, SyntaxToken, T, TextRange,
    TextSize,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completeness {
    Complete,
    /// More lines are needed; the next one is indented by this.
    Incomplete(String),
    /// No continuation can make this valid Rust (a closing bracket with no opener, say).
    Invalid,
}

/// What evcxr makes of a cell, near enough: the body of a function.
const OPEN: &str = "fn __cell() {\n";
const CLOSE: &str = "\n}";

/// evcxr compiles cells as Rust 2024.
const EDITION: Edition = Edition::Edition2024;

/// The edition whose tokens are read for brackets, strings and comments. rust-analyzer's lexer,
/// in 2024 only, makes the reserved `#"` a two-character error token and lexes the string after
/// it as code; rustc (2024 too) reads a string there that ends at its closing quote, which is
/// what rust-analyzer's 2021 lexer finds (`#`, then the string). The editions' tokens differ in
/// nothing else that matters here (keywords, which are identifiers either way).
const LEXING: Edition = Edition::Edition2021;

/// A cell parsed as a function body by rust-analyzer, whose lexer is rustc's: brackets inside
/// strings, raw strings, char literals and (nested) comments are inside those tokens.
struct Body {
    parse: Parse<SourceFile>,
    /// Where the cell lies in the parsed text.
    cell: TextRange,
}

impl Body {
    fn parse(cell: &str, edition: Edition) -> Body {
        let text = format!("{OPEN}{cell}{CLOSE}");
        Body {
            parse: SourceFile::parse(&text, edition),
            cell: TextRange::at(TextSize::of(OPEN), TextSize::of(cell)),
        }
    }

    /// The cell's tokens (comments and whitespace included), in source order.
    fn tokens(&self) -> impl Iterator<Item = SyntaxToken> {
        let cell = self.cell;
        self.parse
            .syntax_node()
            .descendants_with_tokens()
            .filter_map(NodeOrToken::into_token)
            .filter(move |t| cell.contains(t.text_range().start()))
    }

    /// Whether a string or block comment runs past the cell's end. Such a token swallows the rest
    /// of the text, the wrapper's closing `}` included, so it is the cell's last token and ends
    /// where the text ends; a terminated one is followed by that `}`. (A char literal is never
    /// continued on a later line, so an unterminated one does not count.)
    fn ends_inside_literal(&self) -> bool {
        use SyntaxKind::{BYTE_STRING, C_STRING, COMMENT, STRING};
        let end = self.parse.syntax_node().text_range().end();
        self.tokens().last().is_some_and(|t| {
            matches!(t.kind(), STRING | BYTE_STRING | C_STRING | COMMENT)
                && t.text_range().end() == end
        })
    }

    /// Bracket depth at the cell's end; `None` on a closing bracket that does not match.
    fn bracket_depth(&self) -> Option<usize> {
        let mut open: Vec<SyntaxKind> = Vec::new();
        for kind in self.tokens().map(|t| t.kind()) {
            match kind {
                T!['('] | T!['['] | T!['{'] => open.push(kind),
                T![')'] | T![']'] | T!['}'] if open.pop() != Some(opener(kind)) => return None,
                _ => {}
            }
        }
        Some(open.len())
    }

    /// Whether the cell parses as a function body (what evcxr makes of it). A missing `;` is not
    /// a parse failure here: a cell's last expression has none, and a last `let` without one is
    /// forgiven when it runs.
    fn parses(&self) -> bool {
        self.parse
            .errors()
            .iter()
            .all(|e| e.to_string().contains("expected SEMICOLON"))
    }
}

/// The opening bracket a closing one matches.
fn opener(close: SyntaxKind) -> SyntaxKind {
    match close {
        T![')'] => T!['('],
        T![']'] => T!['['],
        _ => T!['{'],
    }
}

/// Whether `cell` can run now. Commands (`:mem`) are always complete.
pub fn check(cell: &str) -> Completeness {
    if cell.trim_start().starts_with(':') {
        return Completeness::Complete;
    }
    let lexed = Body::parse(cell, LEXING);
    match lexed.bracket_depth() {
        None => Completeness::Invalid,
        Some(_) if lexed.ends_inside_literal() => Completeness::Incomplete(String::new()),
        Some(depth) if depth > 0 => Completeness::Incomplete("    ".repeat(depth)),
        Some(_) if Body::parse(cell, EDITION).parses() => Completeness::Complete,
        Some(_) => Completeness::Invalid,
    }
}

/// The cell with a `;` added after a last `let` that has none (`let y = x.cuda()?`), as people
/// coming from Python write it; evcxr would otherwise report "expected `;`" against its own
/// generated code. Any other cell comes back unchanged.
pub fn forgive(cell: &str) -> std::borrow::Cow<'_, str> {
    let file = Body::parse(cell, EDITION).parse.tree();
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
    #[test]
    fn nested_block_comments_close_level_by_level() {
        assert_eq!(check("/* a /* b */ { */ let x = 1;"), Complete);
        assert_eq!(check("/* /* */ {"), Incomplete(String::new()));
        assert_eq!(check("/** {"), Incomplete(String::new()));
        assert_eq!(check("let s = \"abc\"; /*"), Incomplete(String::new()));
        assert_eq!(check("/* */ */"), Invalid);
    }

    #[test]
    fn raw_strings_end_at_a_quote_with_as_many_hashes() {
        assert_eq!(check("let s = r##\"a \"# { ( \"##;"), Complete);
        assert_eq!(check("let s = r##\"a \"# {"), Incomplete(String::new()));
        assert_eq!(check("let v = vec![r#\"]\"#,"), Incomplete("    ".into()));
        assert_eq!(check("let s = r\"a\\\";"), Complete);
        assert_eq!(check("let s = r#\"\n{\n\"#;"), Complete);
    }

    #[test]
    fn char_literals_are_not_lifetimes() {
        assert_eq!(
            check("let c = '{'; fn f<'a>(x: &'a [u8]) {"),
            Incomplete("    ".into())
        );
        assert_eq!(check("let q = '\\''; let c = '{';"), Complete);
        assert_eq!(
            check("let b = '\\\\'; let v = ["),
            Incomplete("    ".into())
        );
        assert_eq!(check("let c = '\\u{7B}';"), Complete);
        assert_eq!(check("let c = 'é'; let v = ["), Incomplete("    ".into()));
        assert_eq!(check("'outer: loop {"), Incomplete("    ".into()));
        assert_eq!(check("struct A { s: &'static str }"), Complete);
        // As rustc reads it: a char literal that runs to the end of its line, never continued.
        assert_eq!(check("let c = '{"), Invalid);
    }

    #[test]
    fn byte_and_c_strings_are_strings() {
        assert_eq!(check("let b = b\"{[(\";"), Complete);
        assert_eq!(check("let b = b'(';"), Complete);
        assert_eq!(check("let b = b\"abc"), Incomplete(String::new()));
        assert_eq!(check("let b = br\"\\\";"), Complete);
        assert_eq!(check("let b = br#\"a\"}\"#;"), Complete);
        assert_eq!(check("let c = c\"{\";"), Complete);
        assert_eq!(check("let c = c\"abc"), Incomplete(String::new()));
        assert_eq!(check("let c = cr#\"a\"{\"#;"), Complete);
    }

    #[test]
    fn quotes_in_comments_and_escaped_quotes_do_not_open_strings() {
        assert_eq!(check("let x = 1; // a \" quote"), Complete);
        assert_eq!(check("/* \" */ let x = 1;"), Complete);
        assert_eq!(check("let x = 1; /* \" {"), Incomplete(String::new()));
        assert_eq!(check("let s = \"a \\\" {\";"), Complete);
        assert_eq!(check("let s = \"a \\\""), Incomplete(String::new()));
        assert_eq!(check("let s = \"a\\\\\";"), Complete);
        assert_eq!(check("let s = \"日本 {\";"), Complete);
    }

    #[test]
    fn an_open_string_outranks_open_brackets_and_a_stray_closer_outranks_both() {
        assert_eq!(check("f(\"abc"), Incomplete(String::new()));
        assert_eq!(
            check("let s = \"line one {\nline two"),
            Incomplete(String::new())
        );
        assert_eq!(check(") \"abc"), Invalid);
    }

    #[test]
    fn prefixed_and_reserved_strings() {
        // An unknown prefix is an identifier before an ordinary string.
        assert_eq!(check("let s = f\"{x"), Incomplete(String::new()));
        assert_eq!(check("let s = f\"{x}\";"), Invalid);
        // `#"…"#` is reserved in Rust 2024: a string that ends at its quote, then an error.
        assert_eq!(check("let s = #\"a { b\"#;"), Invalid);
        assert_eq!(check("let s = #\"a { b"), Incomplete(String::new()));
    }
}
