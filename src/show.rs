//! How a tensor's card leaves a cell's process: `Tensor::show()` (a card of its own, marked for
//! the front end when the probe runs) and `evcxr_display` (the value of a cell, as evcxr's
//! content blocks). The cards themselves are `display`'s.

use crate::Tensor;
use crate::display::{CARD_BEGIN, CARD_END, CARD_HTML, CARD_PLAIN, card_html, card_text};

impl Tensor {
    /// Prints this tensor's card now, in the REPL as a card of its own (several per cell are
    /// fine), elsewhere as text.
    pub fn show(&self) {
        use std::io::Write;
        let block = if std::env::var_os(crate::probe::ENV).is_some() {
            format!(
                "{CARD_BEGIN}\n{}\n{CARD_PLAIN}\n{}\n{CARD_HTML}\n{}\n{CARD_END}\n",
                card_text(self, true),
                card_text(self, false),
                card_html(self)
            )
        } else {
            format!("{}\n", card_text(self, false))
        };
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(block.as_bytes());
        let _ = out.flush();
    }

    /// Shows the card in evcxr (the REPL and Jupyter): HTML, `text/plain` and an ANSI-coloured
    /// copy for terminals, in one write so the blocks never interleave with other output.
    pub fn evcxr_display(&self) {
        use std::io::Write;
        let block = format!(
            "EVCXR_BEGIN_CONTENT text/html\n{}\nEVCXR_END_CONTENT\nEVCXR_BEGIN_CONTENT text/plain\n{}\nEVCXR_END_CONTENT\nEVCXR_BEGIN_CONTENT text/x-ansi\n{}\nEVCXR_END_CONTENT\n",
            card_html(self),
            card_text(self, false),
            card_text(self, true)
        );
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(block.as_bytes());
        let _ = out.flush();
    }
}
