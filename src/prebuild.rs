//! `placelab prebuild [--shared] [DIR]`: compiles the engine once, before anyone needs it, into
//! the engine directory every session links to. With `--shared` (a class: one build for every
//! learner) the result is readable by all and writable by none, and sessions never replace it.

use std::path::PathBuf;
use std::sync::Arc;

use super::{engine, session};

/// Builds the engine into `dir` (default: `engine::dir()`); returns where it is. Must run before
/// any thread starts (it sets the environment the session reads).
pub fn run(dir: Option<PathBuf>, shared: bool) -> Result<PathBuf, String> {
    let dir = dir.unwrap_or_else(engine::dir);
    let dir = std::path::absolute(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let denied = |e: std::io::Error| format!("cannot write the engine in {}: {e}", dir.display());
    std::fs::create_dir_all(&dir).map_err(denied)?;
    if engine::is_shared(&dir) {
        engine::make_private(&dir).map_err(denied)?;
    }
    // The prebuild's own session lives inside the engine directory, apart from the caller's.
    let scratch = dir.join(engine::PREBUILD_SCRATCH);
    // SAFETY: called from `main` before any other thread exists.
    unsafe {
        std::env::set_var(engine::ENV, &dir);
        std::env::set_var("PLACELAB_CACHE", &scratch);
    }
    let prepared = session::prepare("prebuild")?;
    let quiet: super::cell_output::Sink = Arc::new(|_, _| {});
    let started = session::Session::start(prepared, quiet);
    // Ends the session, and with it its compile directory.
    drop(started?);
    let _ = std::fs::remove_dir_all(&scratch);
    if !engine::is_built(&dir) {
        return Err(format!(
            "the engine compiled, but could not be kept in {}",
            dir.display()
        ));
    }
    engine::slim_library_sources(&dir);
    if shared {
        engine::make_shared(&dir).map_err(denied)?;
    }
    Ok(dir)
}
