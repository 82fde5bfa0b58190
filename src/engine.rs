//! One engine build for every session. The engine and its dependencies are compiled once, into
//! an engine directory (by `placelab prebuild`, or published by the first session that had to
//! build them), and each session's compile directory links to it: its big artefacts (`.rlib`,
//! `.rmeta`, `.so` under `deps/`) are symlinks, and only cargo's small bookkeeping files are
//! copied. A session's own directory then holds little more than its cells, and every cell
//! process maps the same engine `.so` files, so their pages are shared too.
//!
//! Cargo still judges freshness: a session whose engine is out of date rebuilds what changed in
//! its own directory (the rustc wrapper first unlinks the symlinks it would write through, see
//! `unlink_shared_outputs`), and then publishes its build, unless an admin made the engine shared
//! (read-only for the sessions).
//!
//! The engine directory also holds a slimmed copy of the toolchain's library sources for the
//! rust-analyzer inside evcxr (`RUST_SRC_PATH`): without `core::arch`'s thousands of intrinsics it
//! holds about 130 MiB less.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::engine_check::{self, is_cells_own};

/// The engine directory, when not `<cache>/engine`.
pub const ENV: &str = "PLACELAB_ENGINE";
/// Present in an engine an admin prebuilt for others (`prebuild --shared`): sessions read it and
/// never replace it.
const SHARED_MARK: &str = "SHARED";
/// Inside the engine directory: the session a `prebuild` compiles in, removed when it ends.
pub const PREBUILD_SCRATCH: &str = ".prebuild";
/// Under `deps/`, files this big or bigger are linked; everything else is copied.
const LINK_FROM: u64 = 64 * 1024;

/// Where the engine is: `$PLACELAB_ENGINE`, else `<cache>/engine`.
pub fn dir() -> PathBuf {
    std::env::var_os(ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| placelab::cache_dir().join("engine"))
}

/// The compile directory inside an engine directory.
fn build_of(engine: &Path) -> PathBuf {
    engine.join("work")
}

/// Whether `engine` holds a build to link to.
pub fn is_built(engine: &Path) -> bool {
    build_of(engine).join("target").is_dir()
}

/// The CUDA major `engine`'s build is for (`engine_check::built_for_cuda`).
pub fn built_for_cuda(engine: &Path) -> u32 {
    engine_check::built_for_cuda(&build_of(engine))
}

/// Whether sessions must leave `engine` as it is.
pub fn is_shared(engine: &Path) -> bool {
    engine.join(SHARED_MARK).exists()
}

/// How a session's compile directory starts.
pub enum Linked {
    /// It links to the engine's build.
    Yes,
    /// It links to the engine's build, which is for another CUDA major than this machine calls
    /// for: cargo compiles the engine crate and cudarc again for this one (their features
    /// differ), and links the rest.
    OtherCuda { built: u32, wanted: u32 },
    /// There is no engine yet: the session builds it.
    NoEngine,
    /// The engine's build cannot be used (why, in words): the session builds its own, and the
    /// engine, unless shared, is discarded so that the session's build replaces it.
    Unusable(String),
}

/// Makes the fresh compile directory `work` use the engine's build, once `engine_check` finds it
/// whole and made for this toolchain and these sources: its `Cargo.lock`, and a mirror of its
/// `target` with the big artefacts linked. Without a usable engine, `work` gets placelab's own
/// `Cargo.lock`, so the engine is built from the versions placelab was built and tested with
/// (cargo would otherwise resolve the newest ones).
pub fn link(engine: &Path, work: &Path) -> io::Result<Linked> {
    let build = build_of(engine);
    // One `rustc -vV` for every check below.
    let expected = expected();
    if !is_shared(engine) {
        finish_interrupted_publishes(engine, &expected);
    }
    let linked = if !is_built(engine) {
        Linked::NoEngine
    } else {
        match engine_check::verify(&build, &expected) {
            Ok(()) => match engine_check::built_for_cuda(&build) {
                built if built != expected.cuda => Linked::OtherCuda {
                    built,
                    wanted: expected.cuda,
                },
                _ => Linked::Yes,
            },
            Err(why) => {
                if !is_shared(engine) {
                    discard(engine);
                }
                Linked::Unusable(why)
            }
        }
    };
    fs::create_dir_all(work)?;
    if !matches!(linked, Linked::Yes | Linked::OtherCuda { .. }) {
        let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock");
        if lock.is_file() {
            fs::copy(&lock, work.join("Cargo.lock"))?;
        }
        return Ok(linked);
    }
    copy_keeping_mtime(&build.join("Cargo.lock"), &work.join("Cargo.lock"))?;
    mirror(&build.join("target"), &work.join("target"), &|from, to| {
        std::os::unix::fs::symlink(from, to)
    })?;
    Ok(linked)
}

/// What a session linked to an engine of another CUDA major says (`Linked::OtherCuda`).
pub fn other_cuda_notice(engine: &Path, built: u32, wanted: u32) -> String {
    let later = if is_shared(engine) {
        "for itself (the shared engine stays as its admin built it)"
    } else {
        "and later sessions reuse that build"
    };
    format!(
        "the engine build in {} is for CUDA {built}, and this machine's driver and libraries call \
         for CUDA {wanted}: this session compiles the engine crate and cudarc again for CUDA \
         {wanted} (about a minute), {later}.",
        engine.display()
    )
}

/// Cleans up after publishes and discards whose session was killed half-way: their temporary
/// builds (`work.new-PID`, `work.old-PID`, `work.unusable-PID`, PID no longer running) go, as
/// does a half-made copy of the library sources (`rust-src.new-PID`), and an engine whose old
/// build was renamed away just before the new one would have taken its place (`work` missing)
/// gets the old one back, if its manifest still matches its files.
fn finish_interrupted_publishes(engine: &Path, expected: &engine_check::Expected) {
    let Ok(entries) = fs::read_dir(engine) else {
        return;
    };
    let mut left: Vec<(PathBuf, bool)> = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((kind, pid)) = name.rsplit_once('-') else {
            continue;
        };
        let Ok(pid) = pid.parse::<i32>() else {
            continue;
        };
        // SAFETY: signal 0 only asks whether the process exists.
        let running = unsafe { libc::kill(pid, 0) } == 0;
        if running {
            continue;
        }
        if kind == "rust-src.new" {
            let _ = fs::remove_dir_all(entry.path());
        } else if matches!(kind, "work.new" | "work.old" | "work.unusable") {
            left.push((entry.path(), kind == "work.old"));
        }
    }
    let current = build_of(engine);
    for (dir, old) in left {
        let whole = engine_check::verify(&dir, expected).is_ok();
        if old && whole && !current.exists() && fs::rename(&dir, &current).is_ok() {
            continue;
        }
        let _ = fs::remove_dir_all(&dir);
    }
}

/// Removes what a killed `prebuild` left in `engine` (its session's half-made build, hundreds of
/// MiB). Call while holding the build lock: a running prebuild holds it for its whole build.
/// Not from the prebuild's own session, whose cache is that folder.
pub fn sweep_killed_prebuild(engine: &Path) {
    let scratch = engine.join(PREBUILD_SCRATCH);
    if !placelab::cache_dir().starts_with(&scratch) {
        let _ = fs::remove_dir_all(scratch);
    }
}

/// What an engine build must have been made with: this toolchain, these sources.
fn expected() -> engine_check::Expected {
    engine_check::Expected::now(toolchain_version(), super::cuda_libs::choice().major())
}

/// Removes the engine's build (never a shared one's: the caller checks), in one rename so that
/// a session starting meanwhile sees it whole or not at all. Sessions linked to it keep their
/// open files; their links break, and their next build is their own.
pub fn discard(engine: &Path) {
    let build = build_of(engine);
    let gone = engine.join(format!("work.unusable-{}", std::process::id()));
    if fs::rename(&build, &gone).is_ok() {
        let _ = fs::remove_dir_all(&gone);
    }
}

/// A session's compile directory made afresh (its links to the engine gone), for a session
/// that found the engine unusable only when it compiled: it then builds everything itself.
pub fn unlink(work: &Path) -> io::Result<()> {
    let _ = fs::remove_dir_all(work.join("target"));
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock");
    if lock.is_file() {
        fs::copy(&lock, work.join("Cargo.lock"))?;
    }
    Ok(())
}

/// Makes the engine the build in `work` (a session that just compiled the engine): the next
/// sessions link to it instead of compiling it again. Files are hard-linked where the file system
/// allows (no second copy on disk), else copied; the session's cells are left out. The old engine
/// is replaced in one rename, so a session starting meanwhile sees one or the other.
pub fn publish(work: &Path, engine: &Path) -> io::Result<()> {
    fs::create_dir_all(engine)?;
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(engine.join(".publish.lock"))?;
    // SAFETY: flock on a descriptor we own; released when `lock` closes.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let pid = std::process::id();
    let (new, old) = (
        engine.join(format!("work.new-{pid}")),
        engine.join(format!("work.old-{pid}")),
    );
    let _ = fs::remove_dir_all(&new);
    let made = (|| {
        fs::create_dir_all(&new)?;
        copy_keeping_mtime(&work.join("Cargo.lock"), &new.join("Cargo.lock"))?;
        mirror(&work.join("target"), &new.join("target"), &|from, to| {
            // A symlink into the previous engine: keep the file it names, which that engine's
            // removal below would otherwise take.
            let from = fs::canonicalize(from)?;
            fs::hard_link(&from, to).or_else(|_| copy_keeping_mtime(&from, to))
        })?;
        // Last: a publish killed before this leaves no manifest, and no session links to it.
        engine_check::write(&new, &expected())
    })();
    if let Err(e) = made {
        let _ = fs::remove_dir_all(&new);
        return Err(e);
    }
    let current = build_of(engine);
    let had_one = current.exists();
    if had_one {
        fs::rename(&current, &old)?;
    }
    fs::rename(&new, &current)?;
    if had_one {
        let _ = fs::remove_dir_all(&old);
    }
    slim_library_sources(engine);
    Ok(())
}

/// Marks `engine` as prebuilt for others and makes what it holds readable by every user and
/// writable by none, so a session can never change it. The directory itself stays its owner's,
/// for the next `prebuild`.
pub fn make_shared(engine: &Path) -> io::Result<()> {
    fs::write(
        engine.join(SHARED_MARK),
        "Prebuilt by `placelab prebuild --shared`: sessions link to this engine and never change it.\n",
    )?;
    for entry in fs::read_dir(engine)? {
        set_modes(&entry?.path(), 0o444)?;
    }
    set_modes_here(engine, 0o644)
}

/// Gives the owner back the right to replace a shared engine's files (before a new `prebuild`).
pub fn make_private(engine: &Path) -> io::Result<()> {
    let _ = fs::remove_file(engine.join(SHARED_MARK));
    set_modes(engine, 0o644)
}

/// Sets `mode` (plus execute and search bits where there were some, and on directories) on
/// `path` and everything under it.
fn set_modes(path: &Path, mode: u32) -> io::Result<()> {
    if fs::symlink_metadata(path)?.is_dir() {
        // Searchable and writable (when asked) before the walk, so the walk can go in.
        set_modes_here(path, mode | 0o200)?;
        for entry in fs::read_dir(path)? {
            set_modes(&entry?.path(), mode)?;
        }
    }
    set_modes_here(path, mode)
}

fn set_modes_here(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let exec = if meta.is_dir() || meta.permissions().mode() & 0o111 != 0 {
        0o111
    } else {
        0
    };
    fs::set_permissions(path, fs::Permissions::from_mode(mode | exec))
}

/// Where `RUST_SRC_PATH` should point for this engine, when its slimmed sources match the
/// toolchain in use.
pub fn library_sources(engine: &Path) -> Option<PathBuf> {
    let dir = engine.join("rust-src");
    let stamp = fs::read_to_string(dir.join("TOOLCHAIN")).ok()?;
    (Some(stamp) == toolchain_version()).then(|| dir.join("library"))
}

/// Copies the toolchain's library sources (rust-src) into the engine without the per-architecture
/// intrinsics of `core::arch`, for rust-analyzer. Best effort: without it rust-analyzer reads the
/// toolchain's own copy, as before.
pub fn slim_library_sources(engine: &Path) {
    let (Some(version), Some(sysroot)) = (toolchain_version(), sysroot()) else {
        return;
    };
    let from = sysroot.join("lib/rustlib/src/rust/library");
    let dir = engine.join("rust-src");
    let current = fs::read_to_string(dir.join("TOOLCHAIN")).is_ok_and(|s| s == version);
    if !from.is_dir() || current {
        return;
    }
    let temp = engine.join(format!("rust-src.new-{}", std::process::id()));
    let _ = fs::remove_dir_all(&temp);
    let arch = Path::new("stdarch/crates/core_arch/src");
    let copied = copy_tree(&from, &temp.join("library"), &|rel: &Path| {
        // Keep core_arch's own module files; leave out its architecture directories.
        rel.parent() == Some(arch) && from.join(rel).is_dir()
    });
    let done = copied
        .and_then(|()| fs::write(temp.join("TOOLCHAIN"), &version))
        .and_then(|()| {
            let _ = fs::remove_dir_all(&dir);
            fs::rename(&temp, &dir)
        });
    if done.is_err() {
        let _ = fs::remove_dir_all(&temp);
    }
}

fn toolchain_version() -> Option<String> {
    rustc_says(&["-vV"])
}

fn sysroot() -> Option<PathBuf> {
    rustc_says(&["--print", "sysroot"]).map(|s| PathBuf::from(s.trim()))
}

/// The toolchain's folder of target libraries (`libstd-*.so` among them).
pub fn target_libdir() -> Option<PathBuf> {
    rustc_says(&["--print", "target-libdir"])
        .map(|s| PathBuf::from(s.trim()))
        .filter(|d| d.is_dir())
}

/// What `rustc ARGS` prints, when it succeeds.
fn rustc_says(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("rustc")
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Recreates `from`'s tree under `to`: directories made, files under a `deps` directory that are
/// at least `LINK_FROM` big given to `link`, every other file copied with its mtime (cargo
/// compares mtimes). The session's own cells (crate `ctx`, evcxr's `code_N` libraries, the
/// incremental caches) are left out.
fn mirror(from: &Path, to: &Path, link: &dyn Fn(&Path, &Path) -> io::Result<()>) -> io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if is_cells_own(&name) {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&*name));
        let meta = fs::metadata(&src)?;
        if meta.is_dir() {
            mirror(&src, &dst, link)?;
        } else if meta.len() >= LINK_FROM && from.file_name().is_some_and(|d| d == "deps") {
            link(&src, &dst)?;
        } else {
            copy_keeping_mtime(&src, &dst)?;
        }
    }
    Ok(())
}

/// Copies a directory tree as it is, leaving out what `skip` names (paths relative to `from`).
fn copy_tree(from: &Path, to: &Path, skip: &dyn Fn(&Path) -> bool) -> io::Result<()> {
    fn walk(root: &Path, rel: &Path, to: &Path, skip: &dyn Fn(&Path) -> bool) -> io::Result<()> {
        fs::create_dir_all(to.join(rel))?;
        for entry in fs::read_dir(root.join(rel))? {
            let rel = rel.join(entry?.file_name());
            if skip(&rel) {
                continue;
            }
            if fs::metadata(root.join(&rel))?.is_dir() {
                walk(root, &rel, to, skip)?;
            } else {
                fs::copy(root.join(&rel), to.join(&rel))?;
            }
        }
        Ok(())
    }
    walk(from, Path::new(""), to, skip)
}

fn copy_keeping_mtime(from: &Path, to: &Path) -> io::Result<()> {
    fs::copy(from, to)?;
    let modified = fs::metadata(from)?.modified()?;
    fs::File::options()
        .write(true)
        .open(to)?
        .set_modified(modified)
}

/// Called by the rustc wrapper before rustc compiles a crate: removes the symlinks at the paths
/// rustc will write (files in `--out-dir` named for this crate), so that a rebuild writes the
/// session's own files and never through a link into the engine.
pub fn unlink_shared_outputs(args: &[std::ffi::OsString]) {
    let arg = |flag: &str| {
        args.windows(2)
            .find(|w| w[0] == flag)
            .map(|w| w[1].to_string_lossy().into_owned())
    };
    let (Some(out_dir), Some(name)) = (arg("--out-dir"), arg("--crate-name")) else {
        return;
    };
    let extra = args
        .iter()
        .filter_map(|a| a.to_str()?.strip_prefix("extra-filename="))
        .next()
        .unwrap_or("");
    let stem = format!("{name}{extra}");
    let Ok(entries) = fs::read_dir(&out_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let file = file.to_string_lossy();
        let named = file.starts_with(&stem)
            || file
                .strip_prefix("lib")
                .is_some_and(|f| f.starts_with(&stem));
        if named && entry.file_type().is_ok_and(|t| t.is_symlink()) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(root: &Path, files: &[(&str, usize)]) {
        for (path, len) in files {
            let p = root.join(path);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, vec![7u8; *len]).unwrap();
        }
    }

    #[test]
    fn a_linked_session_shares_the_big_artefacts_and_owns_the_rest() {
        let base = std::env::temp_dir().join(format!("placelab-engine-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let (engine, work) = (base.join("engine"), base.join("session/work"));
        tree(
            &build_of(&engine),
            &[
                ("Cargo.lock", 10),
                ("target/x/debug/deps/libplacelab-1.so", 200_000),
                ("target/x/debug/deps/placelab-1.d", 100),
                ("target/x/debug/.fingerprint/placelab-1/lib-placelab", 16),
                ("target/x/debug/build/placelab-2/out/kernels.o", 200_000),
            ],
        );
        engine_check::write(&build_of(&engine), &expected()).unwrap();
        assert!(matches!(link(&engine, &work).unwrap(), Linked::Yes));
        let t = work.join("target/x/debug");
        let so = t.join("deps/libplacelab-1.so");
        assert!(fs::symlink_metadata(&so).unwrap().file_type().is_symlink());
        // Small files, and everything a build script wrote, are the session's own.
        for own in [
            "deps/placelab-1.d",
            ".fingerprint/placelab-1/lib-placelab",
            "build/placelab-2/out/kernels.o",
        ] {
            assert!(
                fs::symlink_metadata(t.join(own)).unwrap().is_file(),
                "{own}"
            );
        }
        let before = fs::metadata(build_of(&engine).join("target/x/debug/deps/placelab-1.d"));
        let after = fs::metadata(t.join("deps/placelab-1.d"));
        assert_eq!(
            before.unwrap().modified().unwrap(),
            after.unwrap().modified().unwrap(),
            "cargo compares mtimes: a copy keeps them"
        );
        // A rebuild of placelab in the session writes its own file, not the engine's.
        let args: Vec<std::ffi::OsString> = [
            "--crate-name",
            "placelab",
            "-C",
            "extra-filename=-1",
            "--out-dir",
            t.join("deps").to_str().unwrap(),
        ]
        .iter()
        .map(Into::into)
        .collect();
        unlink_shared_outputs(&args);
        assert!(!so.exists() && fs::symlink_metadata(&so).is_err());
        fs::write(&so, b"rebuilt").unwrap();
        let shared = build_of(&engine).join("target/x/debug/deps/libplacelab-1.so");
        assert_eq!(fs::metadata(&shared).unwrap().len(), 200_000);
        // Publishing the session's build leaves its cells out.
        tree(
            &work,
            &[
                ("target/x/debug/deps/libctx-9.so", 70_000),
                ("target/x/debug/incremental/a", 1),
            ],
        );
        publish(&work, &engine).unwrap();
        let published = build_of(&engine).join("target/x/debug");
        assert_eq!(
            fs::read(published.join("deps/libplacelab-1.so")).unwrap(),
            b"rebuilt"
        );
        assert!(!published.join("deps/libctx-9.so").exists());
        assert!(!published.join("incremental").exists());
        let _ = fs::remove_dir_all(&base);
    }

    /// An engine build no publish finished (no manifest) is not linked to: the session builds
    /// its own, from placelab's `Cargo.lock`, and the unusable build is discarded.
    #[test]
    fn a_build_without_its_manifest_is_discarded_not_linked() {
        let base = std::env::temp_dir().join(format!("placelab-unfinished-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let (engine, work) = (base.join("engine"), base.join("session/work"));
        tree(
            &build_of(&engine),
            &[
                ("Cargo.lock", 10),
                ("target/x/debug/deps/libplacelab-1.so", 70_000),
            ],
        );
        let Linked::Unusable(why) = link(&engine, &work).unwrap() else {
            panic!("an engine without a manifest was linked");
        };
        assert!(why.contains("no manifest"), "{why}");
        assert!(!is_built(&engine), "the unusable build is discarded");
        assert!(work.join("Cargo.lock").is_file() && !work.join("target").exists());
        let _ = fs::remove_dir_all(&base);
    }

    /// The first session on a machine builds the engine from the versions in placelab's own
    /// `Cargo.lock`, as `cargo build --locked` does, not from whatever is newest on crates.io.
    #[test]
    fn with_no_engine_a_session_starts_from_placelabs_lock_file() {
        let base = std::env::temp_dir().join(format!("placelab-no-engine-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let (engine, work) = (base.join("engine"), base.join("session/work"));
        assert!(matches!(link(&engine, &work).unwrap(), Linked::NoEngine));
        let ours = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock");
        assert_eq!(
            fs::read(work.join("Cargo.lock")).unwrap(),
            fs::read(ours).unwrap()
        );
        let _ = fs::remove_dir_all(&base);
    }
}
