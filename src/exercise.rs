//! Predictions a learner writes down before running the code that answers them, as the
//! notebooks ask: `let my_guess = Some(…);` in one cell, `exercise::check(…)` in the next, which
//! says whether what ran matches. A guess left at `None` is no failure (Run All goes on), and the
//! check says to write one first.

use std::fmt::Debug;

/// How a written prediction compares with what ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No guess was written (still `None`).
    NotWritten,
    Right,
    Wrong,
}

/// Compares the learner's `guess` with `actual`, prints one line saying how it went, and returns
/// the verdict. `what` names the prediction ("y shares x's storage").
///
/// ```
/// use placelab::exercise::{check, Verdict};
/// let my_guess: Option<bool> = Some(true);
/// assert_eq!(check("the copy shares storage", my_guess, false), Verdict::Wrong);
/// ```
pub fn check<T: PartialEq + Debug>(what: &str, guess: Option<T>, actual: T) -> Verdict {
    let (verdict, line) = judge(what, guess, actual);
    println!("{line}");
    verdict
}

fn judge<T: PartialEq + Debug>(what: &str, guess: Option<T>, actual: T) -> (Verdict, String) {
    match guess {
        None => (
            Verdict::NotWritten,
            format!(
                "{what}: {actual:?}. You wrote no prediction: put yours in the cell above \
                 (`Some(…)` in place of `None`) before you read on, then run both cells again."
            ),
        ),
        Some(g) if g == actual => (
            Verdict::Right,
            format!("{what}: {actual:?}, as you predicted."),
        ),
        Some(g) => (
            Verdict::Wrong,
            format!("{what}: {actual:?}, not {g:?} as you predicted. The next cell says why."),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_says_what_ran_and_how_the_guess_compares() {
        let (v, line) = judge("y shares x's storage", None, true);
        assert_eq!(v, Verdict::NotWritten);
        assert!(
            line.starts_with("y shares x's storage: true. You wrote no prediction"),
            "{line}"
        );
        let (v, line) = judge("bytes", Some(4_000_000), 4_000_000);
        assert_eq!(
            (v, line.as_str()),
            (Verdict::Right, "bytes: 4000000, as you predicted.")
        );
        let (v, line) = judge(
            "(y, z) share x's storage",
            Some((false, true)),
            (true, false),
        );
        assert_eq!(v, Verdict::Wrong);
        assert!(
            line.starts_with("(y, z) share x's storage: (true, false), not (false, true)"),
            "{line}"
        );
    }
}
