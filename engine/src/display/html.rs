//! HTML for cards, memory strips, profile tables and magics' tables: an element builder that
//! escapes text and attribute values by construction, and `Html`, markup that is safe to place.
//!
//! ```text
//! el("div").class("placelab-tensor").child(el("b").text("f32[2, 2]")).text(" · 16 B")
//! ```

use std::fmt;

/// Text placed in HTML: the three characters that would read as markup, escaped.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An attribute's value (always written between double quotes): text, with `"` escaped too.
fn escape_attr(s: &str) -> String {
    escape(s).replace('"', "&quot;")
}

/// Markup that may go into a page as it is: an element built by [`el`], escaped text, or a
/// fragment trusted with [`Html::raw`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Html(String);

impl Html {
    /// Text, escaped.
    pub fn text(s: &str) -> Html {
        Html(escape(s))
    }

    /// Markup built elsewhere and trusted as it is (an SVG): nothing in it is escaped.
    pub fn raw(markup: impl Into<String>) -> Html {
        Html(markup.into())
    }
}

impl fmt::Display for Html {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An element being built: its tag, its attributes in the order given, and its content.
#[derive(Debug, Clone)]
pub struct El {
    tag: &'static str,
    attrs: String,
    body: String,
}

/// A new element: `el("td")`.
pub fn el(tag: &'static str) -> El {
    El {
        tag,
        attrs: String::new(),
        body: String::new(),
    }
}

/// An SVG of `width × height` pixels, its text in the sans-serif 11 px the drawings use.
pub(crate) fn svg(width: f64, height: f64) -> El {
    el("svg")
        .attr("xmlns", "http://www.w3.org/2000/svg")
        .attr("width", &width.to_string())
        .attr("height", &height.to_string())
        .attr("font-family", "sans-serif")
        .attr("font-size", "11")
}

impl El {
    /// An attribute; its value is escaped (quotes included).
    pub fn attr(mut self, name: &'static str, value: &str) -> El {
        self.attrs += &format!(" {name}=\"{}\"", escape_attr(value));
        self
    }

    pub fn class(self, class: &str) -> El {
        self.attr("class", class)
    }

    pub fn style(self, style: &str) -> El {
        self.attr("style", style)
    }

    /// Text after the content so far, escaped.
    pub fn text(mut self, s: &str) -> El {
        self.body += &escape(s);
        self
    }

    /// An element (or other markup) after the content so far.
    pub fn child(mut self, child: impl Into<Html>) -> El {
        self.body += &child.into().0;
        self
    }

    pub fn children<C: Into<Html>>(self, children: impl IntoIterator<Item = C>) -> El {
        children.into_iter().fold(self, El::child)
    }

    pub fn into_string(self) -> String {
        Html::from(self).0
    }
}

impl From<El> for Html {
    fn from(e: El) -> Html {
        Html(format!("<{0}{1}>{2}</{0}>", e.tag, e.attrs, e.body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_attribute_values_are_escaped() {
        let h = el("span")
            .attr("title", "say \"hi\" & <go>")
            .text("a < b && \"c\" > d")
            .into_string();
        assert_eq!(
            h,
            "<span title=\"say &quot;hi&quot; &amp; &lt;go&gt;\">a &lt; b &amp;&amp; \"c\" &gt; d</span>"
        );
        assert_eq!(Html::text("<b>").to_string(), "&lt;b&gt;");
    }

    #[test]
    fn elements_nest_in_order_and_raw_markup_is_kept() {
        let h = el("div")
            .class("placelab-x")
            .style("color:#888")
            .text("last ")
            .child(el("code").text(".to()"))
            .children([el("i").text("1"), el("i").text("2")])
            .child(Html::raw("<svg></svg>"))
            .into_string();
        assert_eq!(
            h,
            "<div class=\"placelab-x\" style=\"color:#888\">last <code>.to()</code><i>1</i><i>2</i><svg></svg></div>"
        );
        assert_eq!(el("td").into_string(), "<td></td>");
    }
}
