//! The session's CUDA major, and the libraries its cell process loads. Before the first engine
//! build, a child process probes the machine (`cuda_probe`) and `cuda_choice` picks the major;
//! then, for the cell process (which inherits this process's environment):
//!
//! - the engine is built with that major's feature (`dep_spec`), and its manifest records the
//!   major, so a machine whose driver or libraries changed major rebuilds it;
//! - a folder of links to the chosen NVRTC, cuBLAS and cuBLASLt goes first on `LD_LIBRARY_PATH`.
//!   cudarc tries `libnvrtc.so` and other names before `libnvrtc.so.12`, and any of them may be
//!   another major's (a toolkit's unversioned link, say): in that folder each name is the chosen
//!   file, so no name loads a library of the other major;
//! - where no major fits, `PLACELAB_CUDA_UNUSABLE` carries the reason, which `:devices` and the
//!   first GPU use say (the cell process then loads no CUDA at all).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use placelab::cuda::cuda_major::is_library_of;

use super::cuda_choice::{self, Choice, Found, Library};
use super::cuda_probe;

/// The choice for this process, probed once. No probe where CUDA is turned off
/// (`PLACELAB_NO_CUDA`), nor from a program other than the `placelab` binary (whose hidden
/// subcommand the probe is): a test of the front end's library.
pub fn choice() -> &'static Choice {
    static CHOICE: OnceLock<Choice> = OnceLock::new();
    CHOICE.get_or_init(|| {
        if std::env::var_os("PLACELAB_NO_CUDA").is_some() {
            return Choice::NoDriver {
                why: "PLACELAB_NO_CUDA is set".into(),
            };
        }
        let is_placelab = std::env::current_exe()
            .is_ok_and(|exe| exe.file_name().is_some_and(|n| n == "placelab"));
        if !is_placelab {
            return Choice::NoDriver {
                why: "not probed: this program is not placelab".into(),
            };
        }
        cuda_choice::choose(&cuda_probe::probe())
    })
}

/// The engine's dependency line for the cells: the default build is CUDA 13's.
pub fn dep_spec(sources: &str, major: u32) -> String {
    match major {
        13 => format!("{{ path = {sources:?} }}"),
        m => {
            format!("{{ path = {sources:?}, default-features = false, features = [\"cuda-{m}\"] }}")
        }
    }
}

/// Sets this process's environment for the cell process it will start: the link folder first on
/// `LD_LIBRARY_PATH`, or the reason no major fits. Call before any other thread exists.
pub fn prepare_environment(cache: &Path) -> Result<(), String> {
    match choice() {
        Choice::NoDriver { .. } => Ok(()),
        Choice::Unusable { why, .. } => {
            // SAFETY: the caller runs this before any other thread exists.
            unsafe { std::env::set_var(placelab::cuda::UNUSABLE_ENV, why) };
            Ok(())
        }
        Choice::Major {
            major, libraries, ..
        } => {
            let folder = link_folder(&cache.join("cuda-libs"), *major, libraries).map_err(|e| {
                format!(
                    "cannot make the folder of links to CUDA's libraries under {}: {e}",
                    cache.display()
                )
            })?;
            let current = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
            let mut dirs: Vec<PathBuf> = std::env::split_paths(&current)
                .filter(|d| !d.as_os_str().is_empty() && *d != folder)
                .collect();
            dirs.insert(0, folder);
            let joined = std::env::join_paths(dirs).map_err(|e| e.to_string())?;
            // SAFETY: as above.
            unsafe { std::env::set_var("LD_LIBRARY_PATH", joined) };
            Ok(())
        }
    }
}

/// The links for `libraries` of `major`, made once in `parent`: every name cudarc or NVRTC may
/// open (`libnvrtc.so`, `libnvrtc.so.12`, NVRTC's builtins) names the chosen file. The folder's
/// name hashes its targets, so a changed choice gets a folder of its own, and it is made whole
/// under another name and renamed into place: a session starting meanwhile sees it whole or not
/// at all.
pub fn link_folder(parent: &Path, major: u32, libraries: &[Found]) -> std::io::Result<PathBuf> {
    let links = links(major, libraries);
    let key = links
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, (name, target)| {
            format!("{name}={}\n", target.display())
                .bytes()
                .fold(h, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
        });
    let folder = parent.join(format!("cuda-{major}-{key:016x}"));
    if folder.is_dir() {
        return Ok(folder);
    }
    let new = parent.join(format!(".new-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&new);
    std::fs::create_dir_all(&new)?;
    for (name, target) in &links {
        std::os::unix::fs::symlink(target, new.join(name))?;
    }
    if std::fs::rename(&new, &folder).is_err() {
        // Another session made it first.
        let _ = std::fs::remove_dir_all(&new);
    }
    Ok(folder)
}

/// Each link's name and target.
fn links(major: u32, libraries: &[Found]) -> Vec<(String, PathBuf)> {
    let mut links = Vec::new();
    for found in libraries {
        let stem = found.library.file_prefix().trim_end_matches('.');
        links.push((stem.to_string(), found.path.clone()));
        links.push((format!("{stem}.{major}"), found.path.clone()));
        if found.library != Library::Nvrtc {
            continue;
        }
        // NVRTC opens its builtins by name: those beside the chosen NVRTC.
        let beside = found
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let mut builtins: Vec<String> = std::fs::read_dir(&beside)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| is_library_of(n, "libnvrtc-builtins.so.", major))
            .collect();
        builtins.sort();
        links.extend(builtins.into_iter().map(|n| (n.clone(), beside.join(n))));
    }
    links
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuda_choice::Version;

    /// The folder a session puts first on the loader path: every name cudarc tries for each
    /// library, the soname, and NVRTC's builtins, each naming the chosen file; the same folder
    /// again for the same choice, another for another.
    #[test]
    fn the_link_folder_names_only_the_chosen_files() {
        let base = std::env::temp_dir().join(format!("placelab-cuda-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let wheel = base.join("wheel");
        std::fs::create_dir_all(&wheel).unwrap();
        for name in [
            "libnvrtc.so.12",
            "libnvrtc-builtins.so.12.8",
            "libnvrtc-builtins.so.13.0",
        ] {
            std::fs::write(wheel.join(name), name).unwrap();
        }
        let found = |library, path: PathBuf| Found {
            library,
            version: Version {
                major: 12,
                minor: 8,
            },
            path,
        };
        let libraries = vec![
            found(Library::Nvrtc, wheel.join("libnvrtc.so.12")),
            found(Library::Cublas, "/toolkit/libcublas.so.12".into()),
            found(Library::CublasLt, "/toolkit/libcublasLt.so.12".into()),
        ];
        let folder = link_folder(&base.join("links"), 12, &libraries).unwrap();
        let target = |name: &str| std::fs::read_link(folder.join(name)).unwrap();
        assert_eq!(target("libnvrtc.so"), wheel.join("libnvrtc.so.12"));
        assert_eq!(target("libnvrtc.so.12"), wheel.join("libnvrtc.so.12"));
        assert_eq!(
            target("libnvrtc-builtins.so.12.8"),
            wheel.join("libnvrtc-builtins.so.12.8")
        );
        assert!(!folder.join("libnvrtc-builtins.so.13.0").exists());
        assert_eq!(
            target("libcublas.so"),
            PathBuf::from("/toolkit/libcublas.so.12")
        );
        assert_eq!(
            target("libcublasLt.so.12"),
            PathBuf::from("/toolkit/libcublasLt.so.12")
        );
        assert_eq!(
            link_folder(&base.join("links"), 12, &libraries).unwrap(),
            folder
        );
        let mut other = libraries.clone();
        other[1].path = "/elsewhere/libcublas.so.12".into();
        assert_ne!(
            link_folder(&base.join("links"), 12, &other).unwrap(),
            folder
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_cells_depend_on_the_chosen_major() {
        assert_eq!(dep_spec("/p/engine", 13), "{ path = \"/p/engine\" }");
        assert_eq!(
            dep_spec("/p/engine", 12),
            "{ path = \"/p/engine\", default-features = false, features = [\"cuda-12\"] }"
        );
    }
}
