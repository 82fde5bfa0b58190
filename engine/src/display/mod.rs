//! Everything the engine draws as markup, in one place and through one escaping HTML builder
//! (`html.rs`): a tensor's card and its values (`card.rs`, `preview.rs`), and a profile's tables
//! and memory timeline (`profile_table.rs`, `timeline.rs`). The layers below keep the data; two
//! plain-text tables stay with the APIs users call them through, `memory::memory_summary` and
//! `nn::summary`. The front end draws the strip and plots with the same builder and units.

mod card;
pub mod html;
mod lanes;
mod preview;
mod profile_table;
mod timeline;

pub use card::{
    CARD_BEGIN, CARD_END, CARD_HTML, CARD_PLAIN, card_html, card_html_of, card_text, card_text_of,
    device_badge, header,
};
pub use preview::preview;
