//! A Python venv under `target/` holding pinned packages: made on first use, and made again when
//! the pins change, so a test never runs against packages other than those its file names.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The venv at `dir` after `pip install <install>`, returning its python. `pins` is what the
/// install stands for (a requirements file's text, a wheel's `name==version`): it is written to
/// the venv's marker last, with the venv's path, and a venv whose marker holds other pins (the
/// pins changed), another path (it moved) or none
/// (left half-made by an interrupted run) is removed and made again. Test binaries that run at
/// once (`.ci/test`'s lanes: second_start and jupyter share the Jupyter venv) take turns on a
/// lock file beside it: one makes it while the others wait, then use it.
pub fn pinned_venv(dir: &Path, pins: &str, install: &[&OsStr]) -> Result<PathBuf, String> {
    let lock_path = dir.with_extension("lock");
    if let Some(parent) = lock_path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot make {}: {e}", parent.display()))?;
    }
    let lock = std::fs::File::create(&lock_path)
        .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    let marker = dir.join("placelab-install-complete");
    let python = dir.join("bin/python");
    // A venv's scripts name its path, so a venv that moved (a target/ kept by .ci/run for a
    // clone elsewhere) is made again too.
    let pins = format!("{pins}\nat {}", dir.display());
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == pins) && python.exists() {
        return Ok(python);
    }
    let _ = std::fs::remove_dir_all(dir);
    let started = Instant::now();
    run(Command::new("python3").args(["-m", "venv"]).arg(dir))?;
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(install))?;
    std::fs::write(&marker, pins).map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
    eprintln!(
        "made the venv {} in {:.1} s",
        dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(python)
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}
