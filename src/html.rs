//! Text placed in HTML (cards, memory strips, profile tables, magics' tables): the three
//! characters that would read as markup, escaped.

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
