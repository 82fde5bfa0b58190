//! A cell whose check had no prediction written (`exercise::check` with `None`): under Run All a
//! learner reading top to bottom would see the answer before guessing, so the notebook shows
//! what the cell printed and returned folded, behind a "show what ran" element. `text/plain`
//! stays what it would have been, line for line (a console, and the REPL, show it as ever).

use jupyter_protocol::{Media, MediaType};

use super::iopub::media_of;
use crate::report::Output;
use placelab::display::html::{Html, el};

/// What the summary says, closed.
const SUMMARY: &str =
    "Show what ran: you wrote no prediction. Write yours in the cell above first, then open this.";

/// One `display_data` for the cell's stdout (`printed`) and its outputs other than errors
/// (which stay outside, under it): the text of each in order, and in HTML a `<details>` holding
/// the text in `<pre>` and each output's own HTML.
pub fn folded(printed: &str, outputs: &[Output]) -> Media {
    let mut plain = vec![printed.trim_end().to_string()];
    let mut html = el("details")
        .class("placelab-folded")
        .child(el("summary").style("cursor:pointer").text(SUMMARY));
    if !printed.trim().is_empty() {
        html = html.child(el("pre").text(printed.trim_end()));
    }
    for output in outputs {
        let (text, markup) = match (output, media_of(output)) {
            (_, Some(media)) => shown(&media),
            (Output::Info(text), None) => (text.clone(), el("pre").text(text).into()),
            (_, None) => continue,
        };
        plain.push(text);
        html = html.child(markup);
    }
    plain.retain(|p| !p.is_empty());
    Media::new(vec![
        MediaType::Plain(plain.join("\n")),
        MediaType::Html(html.into_string()),
    ])
}

/// An output's text, and the markup it shows in a page: its HTML or SVG, else its text.
fn shown(media: &Media) -> (String, Html) {
    let mut text = String::new();
    let mut markup = None;
    for m in &media.content {
        match m {
            MediaType::Plain(p) => text = p.clone(),
            MediaType::Html(h) | MediaType::Svg(h) => markup = Some(Html::raw(h.clone())),
            _ => {}
        }
    }
    let markup = markup.unwrap_or_else(|| el("pre").text(&text).into());
    (text, markup)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ErrorKind;

    fn parts(media: &Media) -> (String, String) {
        let mut plain = String::new();
        let mut html = String::new();
        for m in &media.content {
            match m {
                MediaType::Plain(p) => plain = p.clone(),
                MediaType::Html(h) => html = h.clone(),
                _ => {}
            }
        }
        (plain, html)
    }

    /// The text is what the cell showed, in order; the HTML holds it folded, escaped where it is
    /// text, and the error is left for the cell's `error` output.
    #[test]
    fn what_ran_is_folded_and_its_text_kept() {
        let outputs = [
            Output::Card {
                plain: "f32[2] on cuda:0".into(),
                ansi: String::new(),
                html: Some("<div class=\"placelab-tensor\">card</div>".into()),
            },
            Output::Value {
                plain: "true".into(),
                ansi: None,
                html: None,
            },
            Output::error(ErrorKind::Error, "device mismatch"),
        ];
        let printed = "copies: 6 <- the answer\nbytes: 4096. You wrote no prediction\n";
        let (plain, html) = parts(&folded(printed, &outputs));
        assert_eq!(
            plain,
            "copies: 6 <- the answer\nbytes: 4096. You wrote no prediction\nf32[2] on cuda:0\ntrue"
        );
        assert!(html.starts_with("<details class=\"placelab-folded\"><summary"));
        assert!(
            html.contains("<pre>copies: 6 &lt;- the answer\nbytes"),
            "{html}"
        );
        assert!(html.contains("<div class=\"placelab-tensor\">card</div><pre>true</pre>"));
        assert!(!html.contains("mismatch") && !plain.contains("mismatch"));
        assert!(html.ends_with("</details>"));
    }
}
