//! Starts a program the way a user's shell, Jupyter started from a desktop or a JupyterHub
//! spawner does: without what `cargo test` adds to the environment (`LD_LIBRARY_PATH` with the
//! toolchain's library folders, `CARGO_*`, `RUSTUP_TOOLCHAIN`, `OUT_DIR`). A test that passed
//! cargo's environment on would hide a start that works only under cargo (issue 38: a second
//! start that failed with "can't find crate for `placelab`" for everyone but the tests).

use std::process::Command;

/// What a login shell has; everything else is left out.
const KEPT: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TMPDIR", "CI",
];

/// Whether a user's shell would have `name`: the basics above, the locale, the XDG folders,
/// proxies, and placelab's own settings (a developer's `PLACELAB_CLASS_SIZE`, …).
fn a_users(name: &str) -> bool {
    KEPT.contains(&name)
        || ["PLACELAB_", "LC_", "XDG_"]
            .iter()
            .any(|p| name.starts_with(p))
        || name.to_ascii_lowercase().ends_with("_proxy")
}

/// `program` with a user's environment (`a_users` of this process's variables), nothing else.
/// The caller adds the test's own variables (`PLACELAB_CACHE`, …) after this.
pub fn user_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    command.env_clear();
    for (name, value) in std::env::vars_os() {
        if name.to_str().is_some_and(a_users) {
            command.env(name, value);
        }
    }
    command
}
