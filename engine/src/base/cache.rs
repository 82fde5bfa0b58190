//! Where placelab keeps what outlives a process.

/// `~/.cache/placelab` (or `$PLACELAB_CACHE`): compiled CUDA kernels, and the front end's
/// compile directories and evcxr config.
pub fn cache_dir() -> std::path::PathBuf {
    if let Some(d) = std::env::var_os("PLACELAB_CACHE") {
        return d.into();
    }
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    home.join(".cache").join("placelab")
}
