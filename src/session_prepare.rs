//! Before a session starts: its compile directory claimed, the CUDA major chosen, evcxr's
//! environment set (all before any thread runs), and, around the engine's first build, the
//! build lock, what is said when the engine's build cannot be used, and its publishing.

use std::path::PathBuf;

use evcxr::Error as EvcxrError;

use super::build_lock::{self, BuildLock};
use super::setup;
use super::{compile_error, engine, slots};

/// Paths and environment a session needs, prepared in `main` before any thread starts
/// (`std::env::set_var` is not safe once threads run).
pub struct Prepared {
    pub workdir: PathBuf,
    pub probe: PathBuf,
    /// The shared engine build the compile directory links to, or will publish to.
    pub(super) engine: PathBuf,
    /// Said with the first cell: what happened to this session's predecessor when it died
    /// (Jupyter restarted the kernel), and why the engine's build is being made again.
    pub(super) notices: Vec<String>,
    /// Whether the compile directory links to the engine's build (else this session builds it).
    pub(super) linked: bool,
    /// Held while this session builds the engine, so that others starting meanwhile wait for
    /// its build instead of making their own.
    pub(super) build_lock: Option<BuildLock>,
    _lock: std::fs::File,
}

impl Drop for Prepared {
    /// A session's compile directory holds only its cells: it goes when the session ends, with
    /// its side-channel socket (what a session that dies leaves is swept by the next start).
    /// The lock is still held here.
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.workdir);
        let _ = std::fs::remove_file(&self.probe);
    }
}

/// Claims a compile directory and sets evcxr's environment. Call before starting threads.
/// `owner` names the session across restarts (a kernel's connection file).
pub fn prepare(owner: &str) -> Result<Prepared, String> {
    let root = setup::cache_dir();
    let config = setup::write_config(&root).map_err(|e| {
        format!(
            "cannot write the session config under {}: {e}",
            root.display()
        )
    })?;
    setup::keep_private(&root);
    setup::remove_stale_probes(&root);
    setup::forget_cargos_environment();
    setup::put_std_on_the_library_path();
    super::cuda_libs::prepare_environment(&root)?;
    let engine = engine::dir();
    let slots::Claimed {
        work: workdir,
        lock,
        predecessor_died,
        engine_unusable,
        linked,
        engine_other_cuda,
    } = slots::claim(&root.join("sessions"), &engine, owner)
        .map_err(|e| format!("cannot claim a compile directory: {e}"))?;
    let rebuilding = engine_unusable
        .map(|why| engine_rebuild_notice(&engine, &why))
        .or(engine_other_cuda);
    if let Some(notice) = &rebuilding {
        eprintln!("placelab: {notice}");
    }
    std::fs::create_dir_all(&workdir).map_err(|e| e.to_string())?;
    let probe = root.join(format!("probe-{}.sock", std::process::id()));
    // SAFETY: called from `main` before any other thread exists.
    unsafe {
        std::env::set_var("EVCXR_CONFIG_DIR", &config);
        std::env::set_var("EVCXR_TMPDIR", &workdir);
        std::env::set_var(placelab::probe::ENV, &probe);
        if std::env::var_os("RUST_SRC_PATH").is_none()
            && let Some(sources) = engine::library_sources(&engine)
        {
            std::env::set_var("RUST_SRC_PATH", sources);
        }
    }
    Ok(Prepared {
        workdir,
        probe,
        engine,
        notices: predecessor_died.into_iter().chain(rebuilding).collect(),
        linked,
        build_lock: None,
        _lock: lock,
    })
}

impl Prepared {
    /// After a start that compiled engine crates (there was no engine build, or it was out of
    /// date): this session's build becomes the engine the next sessions link to. A shared
    /// engine is an admin's to rebuild: it is left as it is, and the admin is told.
    pub(super) fn keep_engine_build(&self, compiled: usize) {
        let engine = &self.engine;
        if compiled == 0 && engine::is_built(engine) {
            return;
        }
        let built_for = engine::built_for_cuda(engine);
        let wanted = super::cuda_libs::choice().major();
        if engine::is_shared(engine) && built_for != wanted {
            eprintln!(
                "placelab: the shared engine in {0} is built for CUDA {built_for}, and this \
                 machine's driver and libraries call for CUDA {wanted}, so this session compiled \
                 {compiled} crates of its own. Run `placelab prebuild --shared {0}` on this \
                 machine to build it for CUDA {wanted}.",
                engine.display()
            );
        } else if engine::is_shared(engine) {
            eprintln!(
                "placelab: the shared engine in {0} is out of date for this placelab, so this \
                 session compiled {compiled} crates of its own. Run `placelab prebuild --shared {0}` \
                 again.",
                engine.display()
            );
        } else if let Err(e) = engine::publish(&self.workdir, engine) {
            eprintln!(
                "placelab: could not keep the engine build in {} for later sessions: {e}",
                engine.display()
            );
        }
    }

    /// Before this session builds the engine: takes the build lock, or, while another session
    /// holds it, waits for that build and then links to what it published. Without the lock
    /// (the engine directory cannot be written) the session builds on its own, as alone.
    pub(super) fn take_the_build(&mut self) {
        if self.linked || self.build_lock.is_some() || engine::is_shared(&self.engine) {
            return;
        }
        let engine = self.engine.clone();
        let Ok(lock) = build_lock::take(&engine, || {
            eprintln!(
                "placelab: another session is building the engine in {} (minutes, on a first \
                 start); this one waits for it, then uses it",
                engine.display()
            )
        }) else {
            return;
        };
        self.linked = engine::is_built(&engine)
            && matches!(
                engine::link(&engine, &self.workdir),
                Ok(engine::Linked::Yes | engine::Linked::OtherCuda { .. })
            );
        if !self.linked {
            engine::sweep_killed_prebuild(&engine);
            self.build_lock = Some(lock);
        }
    }
}

/// One line for a session that found the engine's build unusable (`why`) and builds its own.
pub(super) fn engine_rebuild_notice(engine: &std::path::Path, why: &str) -> String {
    let dir = engine.display();
    if engine::is_shared(engine) {
        format!(
            "the shared engine build in {dir} cannot be used: {why}. This session builds its own \
             (a few minutes); run `placelab prebuild --shared {dir}` to rebuild the shared one."
        )
    } else {
        format!(
            "the engine build in {dir} cannot be used: {why}. This session builds it again (a few \
             minutes), and later sessions reuse that build."
        )
    }
}

/// What a session says when the engine could not be built or loaded: for a full disk, that and
/// how to see the space; for crates cargo could not get, that and how to fetch them; else the
/// error, and what to do if it happens at every start.
pub(super) fn engine_load_failure(engine_dir: &std::path::Path, e: &EvcxrError) -> String {
    if compile_error::is_disk_full(&e.to_string()) {
        let cache = setup::cache_dir();
        return format!(
            "could not build the placelab engine: the disk that holds {0} is full (No space \
             left on device). Free some space there (`df -h {0}` shows how much is left) and \
             start again.",
            cache.display()
        );
    }
    if compile_error::cannot_fetch_dependencies(&e.to_string()) {
        let said = e.to_string();
        let first = said.lines().next().unwrap_or_default().trim();
        return format!(
            "could not build the placelab engine: cargo could not get its dependencies (a first \
             build needs crates.io, or the crates already in cargo's cache). Cargo said: {first}\n\
             Start again once the network is reachable; or fetch them where it is, into the same \
             CARGO_HOME: cargo fetch --manifest-path {}",
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("Cargo.toml")
                .display()
        );
    }
    let engine = engine_dir.display();
    let fix = if engine::is_shared(engine_dir) {
        format!("ask whoever prebuilt it to run `placelab prebuild --shared {engine}`")
    } else {
        format!("remove the engine build and start again (it is built anew): rm -rf {engine}")
    };
    format!(
        "could not load the placelab engine into the evaluator: {e}\nIf this happens at every \
         start, {fix}"
    )
}
