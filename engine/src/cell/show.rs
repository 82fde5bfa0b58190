//! How a tensor's card leaves a cell's process: `Tensor::show()` (a card of its own, marked for
//! the front end when the probe runs) and `evcxr_display` (the value of a cell, as evcxr's
//! content blocks); `clear_output()` takes back what a cell showed. A profile shows the same two
//! ways, and `profiled` is what `:profile` runs: the profile shown, then the code's value. The
//! cards themselves are `display`'s; `timelined` is what `:timeline` runs: the profile's lanes. Any other value with a `Debug` form is shown by
//! `ShowDebug`, in the cell's first compile.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::device::error::Result;
use crate::display::{
    CARD_BEGIN, CARD_END, CARD_HTML, CARD_PLAIN, card_html_of, card_text_of, preview,
};
use crate::profile::Profile;
use crate::tensor::Tensor;

/// Writes `block` to stdout in one write, so that it never interleaves with other output.
fn write_out(block: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(block.as_bytes());
    let _ = out.flush();
}

/// Prints a card now. In a session (the probe runs) it goes between the markers the front end
/// turns into an output of its own: `forms` gives its ANSI-coloured text and its HTML, beside
/// `plain`. Elsewhere (a plain program) it is `plain` alone.
fn show_card(plain: &str, forms: impl FnOnce() -> (String, String)) {
    if std::env::var_os(crate::cell::probe::ENV).is_none() {
        return write_out(&format!("{plain}\n"));
    }
    let (ansi, html) = forms();
    write_out(&format!(
        "{CARD_BEGIN}\n{ansi}\n{CARD_PLAIN}\n{plain}\n{CARD_HTML}\n{html}\n{CARD_END}\n"
    ))
}

/// evcxr's content blocks for a cell's value, one per MIME type, in one write.
fn evcxr_content(blocks: &[(&str, &str)]) {
    let block: String = blocks
        .iter()
        .map(|(mime, text)| format!("EVCXR_BEGIN_CONTENT {mime}\n{text}\nEVCXR_END_CONTENT\n"))
        .collect();
    write_out(&block)
}

impl Tensor {
    /// Prints this tensor's card now, in the REPL as a card of its own (several per cell are
    /// fine), elsewhere as text.
    pub fn show(&self) {
        // The values are read once for every form of the card.
        let values = preview(self, 0);
        show_card(&card_text_of(self, false, &values), || {
            (
                card_text_of(self, true, &values),
                card_html_of(self, &values),
            )
        })
    }

    /// Shows the card in evcxr (the REPL and Jupyter): HTML, `text/plain` and an ANSI-coloured
    /// copy for terminals, in one write so the blocks never interleave with other output.
    pub fn evcxr_display(&self) {
        let values = preview(self, 0);
        evcxr_content(&[
            ("text/html", &card_html_of(self, &values)),
            ("text/plain", &card_text_of(self, false, &values)),
            ("text/x-ansi", &card_text_of(self, true, &values)),
        ])
    }
}

/// The line `exercise::check` prints for the front end when no prediction was written: a
/// notebook then folds what the cell showed (the answer) until the learner opens it.
pub const FOLD_OUTPUT: &str = "PLACELAB_FOLD_OUTPUT";

/// Asks a notebook to fold the running cell's output behind a "show what ran" element; the REPL
/// and scripts show it as ever. Outside a session it does nothing.
pub(crate) fn fold_output() {
    if std::env::var_os(crate::cell::probe::ENV).is_some() {
        write_out(&format!("{FOLD_OUTPUT}\n"))
    }
}

/// The line `clear_output` prints for the front end: this marker, then `wait` or `now`.
pub const CLEAR_OUTPUT: &str = "PLACELAB_CLEAR_OUTPUT";

/// Clears what the running cell has shown so far, as IPython's `clear_output`: in a notebook
/// its output (text and cards) goes, at once or, with `wait`, when the next output comes (an
/// animation that redraws each step without flicker). A terminal cannot take back what it
/// printed, so the REPL and scripts keep everything. Outside a session it does nothing.
pub fn clear_output(wait: bool) {
    if std::env::var_os(crate::cell::probe::ENV).is_none() {
        return;
    }
    let when = if wait { "wait" } else { "now" };
    write_out(&format!("{CLEAR_OUTPUT} {when}\n"))
}

impl Profile {
    /// Prints the profile now, as `Tensor::show()` prints a card: in a session an output of its
    /// own (the table and the memory timeline in HTML, the table with a sparkline of memory as
    /// text), elsewhere its text.
    pub fn show(&self) {
        let text = self.text();
        show_card(&text, || (text.clone(), self.html()))
    }

    /// Shows the profile in evcxr: the table and the memory timeline (HTML), and the table with
    /// a sparkline of memory as text.
    pub fn evcxr_display(&self) {
        evcxr_content(&[("text/html", &self.html()), ("text/plain", &self.text())])
    }
}

/// What `:profile CODE` runs: `f` (the code) profiled, its profile shown as an output of its own
/// (`Profile::show`), then what `f` gave, as the code gives it unprofiled: its value (the cell's
/// value, shown below the profile), its error (the cell fails with it, under the profile up to
/// it) or its panic (resumed here, once the profile is shown).
pub fn profiled<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    let (profile, outcome) = crate::profile::profile_outcome(f);
    profile.show();
    outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

impl Profile {
    /// Prints the profile's lanes of time now (`Profile::lanes`): in a session an output of its
    /// own (an SVG, and the text lanes), elsewhere the text.
    pub fn show_lanes(&self) {
        let text = self.lanes_text();
        show_card(&text, || (text.clone(), self.lanes_svg()))
    }
}

/// What `:timeline CODE` runs: `f` (the code) profiled, its lanes of time shown as an output of
/// their own (`Profile::show_lanes`), then what `f` gave, as `profiled` does.
pub fn timelined<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    let (profile, outcome) = crate::profile::profile_outcome(f);
    profile.show_lanes();
    outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Shows a cell's last value through `Debug` in the cell's first compile. evcxr first compiles
/// `(value).evcxr_display();` and, when that fails, compiles the cell again to print `{:?}`;
/// with this trait in the prelude the first compile succeeds for the values cells show most
/// (`x.shape()`, `a.item()`, `device`), so such a cell costs one compile, not two.
///
/// It is implemented for the standard library's value types, tuples of them, and placelab's
/// own plain values, not for every `Debug` type: a type from another crate keeps its own
/// `evcxr_display` (an image crate's, say) without a clash, or evcxr's fallback as before.
pub trait ShowDebug {
    fn evcxr_display(&self);
}

fn show_debug(value: &dyn std::fmt::Debug) {
    let alternate = DEBUG_ALTERNATE.load(Ordering::Relaxed);
    let text = match DEBUG_PRECISION.load(Ordering::Relaxed) {
        NO_PRECISION if alternate => format!("{value:#?}"),
        NO_PRECISION => format!("{value:?}"),
        p if alternate => format!("{value:#.p$?}"),
        p => format!("{value:.p$?}"),
    };
    evcxr_content(&[("text/plain", &text)])
}

macro_rules! show_debug_for {
    ($( [$($gen:tt)*] $ty:ty ),* $(,)?) => {
        $(impl<$($gen)*> ShowDebug for $ty {
            fn evcxr_display(&self) {
                show_debug(&self)
            }
        })*
    };
}

show_debug_for!(
    [] bool, [] char, [] (), [] str, [] String,
    [] i8, [] i16, [] i32, [] i64, [] i128, [] isize,
    [] u8, [] u16, [] u32, [] u64, [] u128, [] usize,
    [] f32, [] f64, [] half::f16, [] half::bf16,
    [] std::time::Duration,
    [] crate::device::Device, [] crate::base::dtype::DType, [] crate::base::dtype::Scalar,
    [] crate::memory::caching::MemoryStats, [] crate::transfer::Transfer,
    [T: std::fmt::Debug] [T],
    [T: std::fmt::Debug, const N: usize] [T; N],
    [T: std::fmt::Debug] Vec<T>,
    [T: std::fmt::Debug] std::collections::VecDeque<T>,
    [T: std::fmt::Debug] Option<T>,
    [T: std::fmt::Debug, E: std::fmt::Debug] std::result::Result<T, E>,
    [T: std::fmt::Debug + ?Sized] Box<T>,
    [T: std::fmt::Debug] std::ops::Range<T>,
    [K: std::fmt::Debug, V: std::fmt::Debug, S] std::collections::HashMap<K, V, S>,
    [K: std::fmt::Debug, V: std::fmt::Debug] std::collections::BTreeMap<K, V>,
    [T: std::fmt::Debug, S] std::collections::HashSet<T, S>,
    [T: std::fmt::Debug] std::collections::BTreeSet<T>,
    [A: std::fmt::Debug] (A,),
    [A: std::fmt::Debug, B: std::fmt::Debug] (A, B),
    [A: std::fmt::Debug, B: std::fmt::Debug, C: std::fmt::Debug] (A, B, C),
    [A: std::fmt::Debug, B: std::fmt::Debug, C: std::fmt::Debug, D: std::fmt::Debug] (A, B, C, D),
);

const NO_PRECISION: usize = usize::MAX;
static DEBUG_ALTERNATE: AtomicBool = AtomicBool::new(false);
static DEBUG_PRECISION: AtomicUsize = AtomicUsize::new(NO_PRECISION);

/// The `Debug` forms `ShowDebug` can print: `{:?}`, `{:#?}`, and either with a precision
/// (`{:.3?}`). Returns (alternate, precision), or `None` for any other format string.
pub fn parse_value_format(format: &str) -> Option<(bool, Option<usize>)> {
    let spec = format.strip_prefix("{:")?.strip_suffix("?}")?;
    let (alternate, rest) = match spec.strip_prefix('#') {
        Some(rest) => (true, rest),
        None => (false, spec),
    };
    match rest {
        "" => Some((alternate, None)),
        _ => {
            let digits = rest.strip_prefix('.')?;
            let precision = digits.parse::<usize>().ok().filter(|p| *p < 100)?;
            digits
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then_some((alternate, Some(precision)))
        }
    }
}

/// Sets how `ShowDebug` prints values in this process (the front end's `:fmt`). Returns false,
/// changing nothing, for a format `parse_value_format` does not accept.
pub fn set_value_format(format: &str) -> bool {
    let Some((alternate, precision)) = parse_value_format(format) else {
        return false;
    };
    DEBUG_ALTERNATE.store(alternate, Ordering::Relaxed);
    DEBUG_PRECISION.store(precision.unwrap_or(NO_PRECISION), Ordering::Relaxed);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_formats_are_the_debug_forms() {
        assert_eq!(parse_value_format("{:?}"), Some((false, None)));
        assert_eq!(parse_value_format("{:#?}"), Some((true, None)));
        assert_eq!(parse_value_format("{:.3?}"), Some((false, Some(3))));
        assert_eq!(parse_value_format("{:#.12?}"), Some((true, Some(12))));
        for bad in [
            "{}",
            "{:?",
            "{:.?}",
            "{:.x?}",
            "{:+.3?}",
            "{:.-1?}",
            "{:.1000?}",
            "",
        ] {
            assert_eq!(parse_value_format(bad), None, "{bad}");
        }
    }
}
