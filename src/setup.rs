//! Process start-up for the front end: evcxr's child-process and rustc-wrapper hooks (with the
//! Rust 1.95 `core` metadata fix for dylib mode), and the directories and configuration evcxr
//! compiles cells in.

use std::path::{Path, PathBuf};

/// Must run first in `main`: if this process is evcxr's cell runner or rustc wrapper, it
/// never returns.
pub fn hooks() {
    wrap_rustc();
    if std::env::var_os("EVCXR_IS_RUNTIME").is_some() {
        die_with_the_session();
    }
    evcxr::runtime_hook();
}

/// In a cell's process (evcxr's runtime): the kernel's SIGKILL (jupyter_client's last resort, or
/// the OOM killer's) must not leave a looping cell running for ever, a core of a class's server
/// each; an idle one ends by itself, at the end of its stdin. `PR_SET_PDEATHSIG` fires when the
/// thread that started this process ends: the session's own thread (evcxr starts and restarts
/// the process there), which ends only with the session.
///
/// The process also leaves its parent's process group. A terminal's Ctrl-C (or a signal-mode
/// client's `killpg`) went to it directly too: under load the front end's queued SIGINT, which
/// names the cell, arrived while the terminal's was still pending, and was merged into it (a
/// standard signal is pending once), so the handler saw only the terminal's, which it ignores,
/// and the loop ran on until the grace period killed it. Every SIGINT it gets now is the
/// front end's.
fn die_with_the_session() {
    // SAFETY: sets this process's parent-death signal and its own process group (it leads no
    // session); no memory is passed.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        libc::setpgid(0, 0);
    }
}

/// evcxr runs this binary as its rustc wrapper; re-run ourselves with two arguments added:
///
/// - In dylib mode evcxr passes `--extern core=<sysroot>/libstd-*.so`; since Rust 1.95 that file
///   carries only a metadata stub, and crates with `#![no_std]` dependencies (libm,
///   rand_core…) fail with "only metadata stub found for 'dylib' dependency 'core'". The
///   matching `.rmeta`, in the joined `--extern=` form (which evcxr leaves alone), fixes it.
/// - evcxr shows no warnings, so in cells (crate `ctx`) an unused tensor or `Result` is made an
///   error: a bare `x.to(&device)?;` then says that `.to()` is not in place.
fn wrap_rustc() {
    let wrapping = std::env::var_os("EVCXR_RUSTC_WRAPPER").is_some()
        && std::env::var_os("EVCXR_FORCE_DYLIB").is_some();
    if !wrapping || std::env::var_os("PLACELAB_CORE_FIXED").is_some() {
        return;
    }
    let core_rmeta = std::env::var("EVCXR_CORE_EXTERN")
        .ok()
        .and_then(|v| v.strip_prefix("core=").map(PathBuf::from))
        .map(|so| so.with_extension("rmeta"))
        .filter(|rmeta| rmeta.exists())
        .map(|rmeta| {
            let mut arg = std::ffi::OsString::from("--extern=core=");
            arg.push(rmeta.as_os_str());
            arg
        });
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let is_cell = args
        .windows(2)
        .any(|w| w[0] == "--crate-name" && w[1] == "ctx");
    if !is_cell {
        super::engine::unlink_shared_outputs(&args);
    }
    if core_rmeta.is_none() && !is_cell {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    // Replace this process rather than wait on a child: one process fewer per compile.
    let err = std::os::unix::process::CommandExt::exec(
        std::process::Command::new(exe)
            .args(&args)
            .args(is_cell.then_some("-Dunused_must_use"))
            .args(core_rmeta)
            .env("PLACELAB_CORE_FIXED", "1"),
    );
    eprintln!("placelab: could not run the rustc wrapper: {err}");
    std::process::exit(101);
}

pub use placelab::cache_dir;

/// Removes from this process's environment what cargo adds when it starts a program
/// (`cargo run`, `cargo test`): its `CARGO_*` variables about the package it ran, `OUT_DIR`,
/// `RUSTUP_TOOLCHAIN`, and the folders it put in front of `LD_LIBRARY_PATH` (the target
/// directory's, the toolchain's libraries). The evaluator's cargo and every cell inherit the
/// environment, so a session started by cargo would build the engine in another environment than
/// one started from a shell, Jupyter or JupyterHub; every start now sees the same one. Settings
/// a user gives cargo (`CARGO_HOME`, `CARGO_NET_OFFLINE`, `CARGO_HTTP_*`, …) stay. So does a
/// `RUSTC_WRAPPER` (a compile cache), but not clippy's workspace wrapper and its arguments
/// (`RUSTC_WORKSPACE_WRAPPER`, `CLIPPY_ARGS`; CI builds the tests through clippy): under them a
/// cell with an unused variable would fail to compile. Call before any thread starts.
pub fn forget_cargos_environment() {
    let ours = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    for (name, value) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        let cargos = name == "OUT_DIR"
            || name == "RUSTUP_TOOLCHAIN"
            || name == "CARGO"
            || name == "RUSTC_WORKSPACE_WRAPPER"
            || name == "CLIPPY_ARGS"
            || [
                "CARGO_PKG_",
                "CARGO_MANIFEST_",
                "CARGO_CRATE_",
                "CARGO_BIN_",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
                "CARGO_CFG_",
            ]
            .iter()
            .any(|p| name.starts_with(p));
        // SAFETY: the caller runs this before any other thread exists.
        if cargos {
            unsafe { std::env::remove_var(name) };
        } else if name == "LD_LIBRARY_PATH" {
            let kept: Vec<PathBuf> = std::env::split_paths(&value)
                .filter(|dir| !is_cargos_library_folder(dir, ours.as_deref()))
                .collect();
            if kept.is_empty() {
                unsafe { std::env::remove_var(name) };
            } else if let Ok(joined) = std::env::join_paths(kept) {
                unsafe { std::env::set_var(name, joined) };
            }
        }
    }
}

/// Puts the toolchain's standard library folder (`rustc --print target-libdir`, which holds
/// `libstd-*.so`) first on `LD_LIBRARY_PATH`, for every start alike. evcxr builds every crate as
/// a dylib linked to `libstd-*.so` and found through a *relative* run path (`-C rpath`), fixed
/// where the crate was compiled: in a session's directory, one level deeper under the cache than
/// the engine it is then published to (or anywhere at all, for a shared `PLACELAB_ENGINE`). From
/// the engine the relative path misses the toolchain, rustc cannot load the engine's proc
/// macros, and every later start failed with "can't find crate for `placelab`" (issue 38 again,
/// for starts outside cargo: `cargo run` and `cargo test` put this folder on the path, and a
/// cache deep enough below `/` hides it, as the ".." past the root collapse). Call before any
/// thread starts.
pub fn put_std_on_the_library_path() {
    let Some(std_dir) = super::engine::target_libdir() else {
        return;
    };
    let current = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&current)
        .filter(|d| !d.as_os_str().is_empty() && *d != std_dir)
        .collect();
    dirs.insert(0, std_dir);
    if let Ok(joined) = std::env::join_paths(dirs) {
        // SAFETY: the caller runs this before any other thread exists.
        unsafe { std::env::set_var("LD_LIBRARY_PATH", joined) };
    }
}

/// A folder cargo puts on `LD_LIBRARY_PATH`: a toolchain's libraries (`…/lib` beside
/// `…/lib/rustlib`), or this binary's target directory (`target/release`, its `deps`).
fn is_cargos_library_folder(dir: &Path, ours: Option<&Path>) -> bool {
    let toolchain = dir.to_string_lossy().contains("/lib/rustlib/")
        || (dir.ends_with("lib") && dir.join("rustlib").is_dir());
    let target = ours.is_some_and(|bin| dir == bin || dir == bin.join("deps"));
    toolchain || target
}

/// Makes the cache its owner's alone, whatever the umask: it holds a learner's code (cells,
/// history, plots) and the sockets that reach their sessions, and on a class's server other
/// learners are other users. (A class's shared engine lives elsewhere, `PLACELAB_ENGINE`.)
pub fn keep_private(root: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700));
}

/// Removes the side-channel sockets of sessions whose process is gone.
pub fn remove_stale_probes(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let pid = name
            .to_str()
            .and_then(|n| {
                // A socket still being made private has `.staging` after its name.
                let n = n.strip_suffix(".staging").unwrap_or(n);
                n.strip_prefix("probe-")?.strip_suffix(".sock")
            })
            .and_then(|p| p.parse::<i32>().ok());
        // SAFETY: signal 0 only asks whether the process exists.
        if let Some(pid) = pid
            && unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// evcxr's settings, but for where variables' types come from: dylib mode (one copy of the
/// engine's state for every cell), cells at `:opt 0`. `benches/session.rs` runs plain evcxr
/// with these alone.
pub const EVCXR_SETTINGS: &str =
    "[evcxr]\nallow_static_linking = false\nopt_level = \"0\"\npreserve_vars_on_panic = true\n";

/// Writes the configuration evcxr reads at start: [`EVCXR_SETTINGS`], with variables' types
/// from rustc (vendor/evcxr/PATCH.md: rust-analyzer is loaded only to complete and inspect,
/// which keeps a kernel small); and, in a parent of the compile directories, a cargo profile
/// that builds dependencies (the engine) optimised.
pub fn write_config(root: &Path) -> std::io::Result<PathBuf> {
    let config = root.join("config");
    write_unless_same(
        &config.join("evcxr.toml"),
        &format!("{EVCXR_SETTINGS}variable_types = \"rustc\"\n"),
    )?;
    write_unless_same(
        &root.join(".cargo/config.toml"),
        "# Written by placelab: dependencies of REPL cells (the engine) are built optimised.\n[profile.dev.package.\"*\"]\nopt-level = 3\nincremental = false\n",
    )?;
    Ok(config)
}

/// Writes `text` to `path` unless it holds it already; in one rename, because sessions starting
/// together (a class) each write it while another's cargo may be reading it: a profile read
/// half-written would build the engine's crates again at another opt-level.
fn write_unless_same(path: &Path, text: &str) -> std::io::Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    let dir = path.parent().expect("a file in a folder");
    std::fs::create_dir_all(dir)?;
    let temp = dir.join(format!(".new-{}", std::process::id()));
    std::fs::write(&temp, text)?;
    std::fs::rename(&temp, path)
}
