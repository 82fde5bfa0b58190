//! A step of a test that this machine cannot run, said where `cargo test` shows it: written to
//! stderr directly, past the harness's capture of a passing test's output (which hides an
//! `eprintln!`), as `SKIPPED <test>: <step> - <why>`, the shape of pytest's skip lines.

use std::io::Write;

pub fn report(test: &str, step: &str, why: &str) {
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {step} - {why}");
}
