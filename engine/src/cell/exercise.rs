//! Predictions a learner writes down before running the code that answers them, as the
//! notebooks ask: `let my_guess = Some(…);` in one cell, `exercise::check(…)` in the next, which
//! says whether what ran matches. A guess left at `None` is no failure (Run All goes on), and the
//! check says to write one first. A task starts from a scaffold, `exercise::attempt(|| {
//! todo!(…) })`, which says what is left to write until the learner has written it.

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
    say(verdict, &line)
}

/// Prints a check's line, folded when no guess was written, and returns its verdict.
fn say(verdict: Verdict, line: &str) -> Verdict {
    if verdict == Verdict::NotWritten {
        // Read top to bottom under Run All, the answer would come before any guess.
        crate::cell::show::fold_output();
    }
    println!("{line}");
    verdict
}

/// Compares a guessed number with `actual`, as `check` does, but right when the guess is within
/// `share` of it (0.2: 20%): for times, which nobody guesses to the digit. Both print to two
/// decimals.
///
/// ```
/// use placelab::exercise::{check_near, Verdict};
/// assert_eq!(check_near("the loop's time, ms", Some(1.5), 1.62, 0.2), Verdict::Right);
/// ```
pub fn check_near(what: &str, guess: Option<f64>, actual: f64, share: f64) -> Verdict {
    let within = format!("within {:.0}% of", share * 100.0);
    let (verdict, line) = match guess {
        None => (
            Verdict::NotWritten,
            not_written(what, &format!("{actual:.2}")),
        ),
        Some(g) if (g - actual).abs() <= share * actual.abs() => (
            Verdict::Right,
            format!("{what}: {actual:.2}, {within} your {g:.2}."),
        ),
        Some(g) => (
            Verdict::Wrong,
            format!("{what}: {actual:.2}, not {within} your {g:.2}. Read on for why."),
        ),
    };
    say(verdict, &line)
}

/// The start of the message of a `todo!()` panic.
const TODO: &str = "not yet implemented";

/// Runs a learner's task, written in place of the scaffold's `todo!(…)`. While the `todo!()` is
/// still there, it prints what is left to do and returns `Ok` (Run All goes on); the task's own
/// errors come back as any cell's do, and any other panic stays a panic.
///
/// ```
/// use placelab::exercise::attempt;
/// // The scaffold, as a notebook gives it: not done yet, and no failure.
/// attempt(|| todo!("print the tensor's device")).unwrap();
/// // Written: it runs.
/// attempt(|| { println!("cuda:0"); Ok(()) }).unwrap();
/// ```
pub fn attempt(
    task: impl FnOnce() -> crate::device::error::Result<()>,
) -> crate::device::error::Result<()> {
    match crate::device::guard::catch_quietly(task) {
        Ok(done) => done,
        Err(msg) => match left_to_do(&msg) {
            Some(line) => {
                println!("{line}");
                Ok(())
            }
            // Raised again so that it shows as the cell's panic, message and all.
            None => panic!("{msg}"),
        },
    }
}

/// What `attempt` prints for a `todo!()` panic's message (`None` for any other panic).
fn left_to_do(panic: &str) -> Option<String> {
    let rest = panic.strip_prefix(TODO)?;
    let task = rest.trim_start_matches(':').trim();
    let task = match task.is_empty() {
        true => String::new(),
        false => format!(": {task}"),
    };
    Some(format!(
        "Your turn{task}. Write your code in place of `todo!(…)` and run this cell again \
         (a solution is folded under it: try yours first)."
    ))
}

/// What a check says when no guess was written: what ran (`shown`), and to write one first.
fn not_written(what: &str, shown: &str) -> String {
    format!(
        "{what}: {shown}. You wrote no prediction: put yours in the cell above \
         (`Some(…)` in place of `None`) before you read on, then run both cells again."
    )
}

fn judge<T: PartialEq + Debug>(what: &str, guess: Option<T>, actual: T) -> (Verdict, String) {
    match guess {
        None => (
            Verdict::NotWritten,
            not_written(what, &format!("{actual:?}")),
        ),
        Some(g) if g == actual => (
            Verdict::Right,
            format!("{what}: {actual:?}, as you predicted."),
        ),
        Some(g) => (
            Verdict::Wrong,
            format!("{what}: {actual:?}, not {g:?} as you predicted. Read on for why."),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scaffold_says_what_is_left_and_a_written_task_runs() {
        assert_eq!(
            left_to_do("not yet implemented: copy `batch` to the GPU").as_deref(),
            Some(
                "Your turn: copy `batch` to the GPU. Write your code in place of `todo!(…)` and \
                 run this cell again (a solution is folded under it: try yours first)."
            )
        );
        assert!(
            left_to_do("not yet implemented")
                .unwrap()
                .starts_with("Your turn. Write")
        );
        assert_eq!(left_to_do("index out of bounds"), None);
        assert!(attempt(|| todo!("the task")).is_ok());
        let mut ran = false;
        assert!(
            attempt(|| {
                ran = true;
                Ok(())
            })
            .is_ok()
        );
        assert!(ran);
        let failed = attempt(|| Err(crate::device::error::Error::Interrupted));
        assert!(failed.is_err());
        let other = std::panic::catch_unwind(|| attempt(|| panic!("a real bug")));
        assert!(other.is_err(), "a panic that is no todo!() stays a panic");
    }

    #[test]
    fn a_guessed_number_is_right_within_its_share() {
        let what = "the loop's time, ms";
        assert_eq!(check_near(what, Some(1.3), 1.62, 0.2), Verdict::Right);
        assert_eq!(check_near(what, Some(1.2), 1.62, 0.2), Verdict::Wrong);
        assert_eq!(check_near(what, None, 1.62, 0.2), Verdict::NotWritten);
    }

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
