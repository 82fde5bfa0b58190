//! JupyterLab in headless Chromium on the placelab kernel: a notebook cell moves a tensor to
//! a simulated cuda:0 and the rendered page shows the card (device, shape) and the memory
//! strip's cuda:0 row; a second cell, `:plot transfers`, shows the transfers' SVG plot.
//! Ignored unless asked for (it installs JupyterLab and Chromium and takes minutes on a cold
//! compile cache): `cargo test --test jupyter -- --ignored browser`, which cargo reports as
//! run, never as passed when it did not run.
//! The work is done by tests/browser/setup.sh and tests/browser/lab.mjs; see
//! tests/browser/README.md. The screenshot is kept at target/browser-artefacts/notebook.png,
//! and the README's picture (copied by hand to notebooks/screenshot.png) at readme.png there.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where setup.sh and lab.mjs keep everything (always the repository's target/, whatever
/// CARGO_TARGET_DIR says, as the other Jupyter tests do).
fn target_dir() -> PathBuf {
    repo().join("target")
}

fn run(what: &str, cmd: &mut Command) {
    eprintln!("browser test: {what}: {cmd:?}");
    let started = std::time::Instant::now();
    let status = cmd
        .current_dir(repo())
        // The compile cache the other kernel tests share: warm, the cell takes seconds.
        .env(
            "PLACELAB_CACHE",
            target_dir().join("placelab-session-cache"),
        )
        .status()
        .unwrap_or_else(|e| panic!("browser test: {what}: could not start {cmd:?}: {e}"));
    eprintln!(
        "browser test: {what}: {status} after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        status.success(),
        "browser test: {what} failed ({status}); its output is above"
    );
}

fn is_png(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.len() > 1000 && b.starts_with(b"\x89PNG\r\n\x1a\n"))
}

/// The README's picture is committed (notebooks/screenshot.png): it stays under this size.
const README_PICTURE_MAX_BYTES: u64 = 240_000;

#[test]
#[ignore = "installs JupyterLab and Chromium (minutes): cargo test --test jupyter -- --ignored browser"]
fn jupyterlab_in_chromium_shows_the_card_and_memory_strip() {
    let _one_kernel = super::one_kernel_at_a_time();
    let node_ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        node_ok,
        "browser test: `node` is not on PATH (Node.js 20 or later runs tests/browser/lab.mjs)"
    );

    let target = target_dir();
    // JupyterLab, playwright-core and Chromium (idempotent: seconds when all are there).
    run(
        "setup",
        Command::new("bash").arg(repo().join("tests/browser/setup.sh")),
    );

    // The kernelspec, written by the binary under test, where JupyterLab is told to look.
    let prefix = target.join("browser-prefix");
    let _ = std::fs::remove_dir_all(&prefix);
    run(
        "install-kernel",
        crate::user_command(env!("CARGO_BIN_EXE_placelab"))
            .arg("install-kernel")
            .arg("--prefix")
            .arg(&prefix),
    );
    let spec = prefix.join("share/jupyter/kernels/placelab/kernel.json");
    assert!(
        spec.is_file(),
        "browser test: install-kernel wrote no {}",
        spec.display()
    );

    let shot = target.join("browser-artefacts/notebook.png");
    let _ = std::fs::remove_file(&shot);
    let readme = target.join("browser-artefacts/readme.png");
    let _ = std::fs::remove_file(&readme);
    // Server, notebook, Chromium, the cell and the checks; it prints each step and, on a
    // failure, the reason and target/browser-artefacts/failure.png.
    run(
        "JupyterLab in Chromium (tests/browser/lab.mjs)",
        crate::user_command("node")
            .arg(repo().join("tests/browser/lab.mjs"))
            .arg("--kernel-prefix")
            .arg(&prefix),
    );
    assert!(
        is_png(&shot),
        "browser test: lab.mjs passed but left no screenshot at {}",
        shot.display()
    );
    println!("browser test: screenshot at {}", shot.display());
    assert!(
        is_png(&readme),
        "browser test: lab.mjs passed but left no README picture at {}",
        readme.display()
    );
    let bytes = std::fs::metadata(&readme).map_or(0, |m| m.len());
    assert!(
        bytes <= README_PICTURE_MAX_BYTES,
        "browser test: the README picture {} is {bytes} bytes, over {README_PICTURE_MAX_BYTES}",
        readme.display()
    );
    println!(
        "browser test: README picture at {} ({bytes} bytes; \
         cp target/browser-artefacts/readme.png notebooks/screenshot.png to refresh the README's)",
        readme.display()
    );
}
