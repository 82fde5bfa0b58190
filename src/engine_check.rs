//! What a session checks before it links to an engine build: the manifest a publish writes
//! (`work/MANIFEST`) against the engine's files, the toolchain and the sources in use.
//!
//! Why: rustc records each crate's dependencies by their crate hash, and the host artefacts of a
//! build (proc-macro libraries, which rustc loads) are not bit-for-bit the same from one build to
//! the next. An engine whose proc macros come from another build than its target crates links
//! while nothing recompiles, and then every compile that loads them (placelab itself after a
//! source change or a build script's rerun, or a cell) fails with "can't find crate for `half`"
//! (issue 38). So the manifest holds a hash of every host library, and the length of every other
//! artefact: a build killed half-way, a truncated or deleted file, libraries swapped in from
//! another build, another toolchain or another clone's sources are all seen before linking.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The engine's sources, the crate `placelab` that every cell depends on: the workspace's
/// `engine/` folder, beside this crate's.
pub const SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/engine");

/// Written last by a publish, inside the build directory that is renamed into place.
const MANIFEST: &str = "MANIFEST";
const HEADER: &str = "placelab engine manifest 1";

/// What an engine build must match: the toolchain (`rustc -vV`), the sources it compiles, and
/// the CUDA major it is built for (`cuda_libs`).
pub struct Expected {
    pub toolchain: String,
    pub sources: String,
    pub cuda: u32,
}

impl Expected {
    /// The toolchain a session's cargo will use, this binary's clone, and the CUDA major chosen.
    pub fn now(toolchain: Option<String>, cuda: u32) -> Expected {
        Expected {
            toolchain: toolchain
                .unwrap_or_default()
                .lines()
                .filter(|l| l.starts_with("release:") || l.starts_with("commit-hash:"))
                .collect::<Vec<_>>()
                .join(" "),
            sources: SOURCES.to_string(),
            cuda,
        }
    }
}

/// Writes `build`'s manifest (`build` holds `Cargo.lock` and `target`).
pub fn write(build: &Path, expected: &Expected) -> io::Result<()> {
    let mut text = format!(
        "{HEADER}\ntoolchain {}\nsources {}\ncuda {}\n",
        expected.toolchain, expected.sources, expected.cuda
    );
    for (rel, entry) in artefacts(&build.join("target"))? {
        text.push_str(&format!("{} {rel}\n", entry.line()));
    }
    let temp = build.join(format!("{MANIFEST}.new"));
    fs::write(&temp, text)?;
    fs::rename(temp, build.join(MANIFEST))
}

/// `Ok(())` when `build` can be linked to; else why not, in words for the user.
pub fn verify(build: &Path, expected: &Expected) -> Result<(), String> {
    let Ok(text) = fs::read_to_string(build.join(MANIFEST)) else {
        return Err(
            "it has no manifest: a build that did not finish, or one made by a placelab \
                    from before manifests"
                .into(),
        );
    };
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) {
        return Err("its manifest is not one this placelab reads".into());
    }
    let field = |line: Option<&str>, name: &str| {
        line.and_then(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .map(str::to_string)
    };
    let toolchain = field(lines.next(), "toolchain").unwrap_or_default();
    if toolchain != expected.toolchain {
        return Err(format!(
            "it was built by another Rust toolchain ({toolchain}; now {})",
            expected.toolchain
        ));
    }
    let sources = field(lines.next(), "sources").unwrap_or_default();
    if sources != expected.sources {
        return Err(format!(
            "it was built from the placelab sources in {sources}, not {}",
            expected.sources
        ));
    }
    // Builds made before the line existed are all CUDA 13's (`built_for_cuda` reads it).
    let mut lines = lines.peekable();
    if lines.peek().is_some_and(|l| l.starts_with("cuda ")) {
        lines.next();
    }
    let target = build.join("target");
    for line in lines {
        let mut words = line.splitn(3, ' ');
        let (Some(kind), Some(value), Some(rel)) = (words.next(), words.next(), words.next())
        else {
            return Err(format!("its manifest has a line it cannot read: {line:?}"));
        };
        let path = target.join(rel);
        let Ok(meta) = fs::metadata(&path) else {
            return Err(format!("{rel} is missing"));
        };
        let ok = match kind {
            "len" => value.parse() == Ok(meta.len()),
            "hash" => hash_file(&path).is_ok_and(|h| format!("{h:016x}") == value),
            _ => false,
        };
        if !ok {
            return Err(format!(
                "{rel} is not the file that was built with the rest (another build's, or changed)"
            ));
        }
    }
    Ok(())
}

/// The CUDA major `build`'s manifest records (13 for a build made before manifests recorded
/// it, or without a manifest).
pub fn built_for_cuda(build: &Path) -> u32 {
    let text = fs::read_to_string(build.join(MANIFEST)).unwrap_or_default();
    text.lines()
        .take(5)
        .find_map(|l| l.strip_prefix("cuda ")?.parse().ok())
        .unwrap_or(13)
}

enum Entry {
    Len(u64),
    Hash(u64),
}

impl Entry {
    fn line(&self) -> String {
        match self {
            Entry::Len(n) => format!("len {n}"),
            Entry::Hash(h) => format!("hash {h:016x}"),
        }
    }
}

/// Every artefact cargo reads back under `target` (paths relative to it): the host libraries
/// that rustc loads (`debug/deps/*.so`: proc macros and what they link) by hash, the other
/// libraries and metadata by length. Fingerprints, dep-info and build-script outputs are left
/// out: cargo checks those itself, and a session rewrites some of them.
fn artefacts(target: &Path) -> io::Result<Vec<(String, Entry)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(target)? {
        // `target/debug/deps` holds the host's crates (cargo is given `--target`), and
        // `target/<triple>/debug/deps` the target's.
        let platform = entry?.path();
        let host = platform.file_name().is_some_and(|n| n == "debug");
        let deps = if host {
            PathBuf::from("debug/deps")
        } else {
            Path::new(&entry_name(&platform)).join("debug/deps")
        };
        let Ok(files) = fs::read_dir(target.join(&deps)) else {
            continue;
        };
        for file in files {
            let file = file?;
            let name = file.file_name().to_string_lossy().into_owned();
            let is_library = [".so", ".rlib", ".rmeta"].iter().any(|e| name.ends_with(e));
            if !is_library || is_cells_own(&name) {
                continue;
            }
            let path = file.path();
            let entry = if host && name.ends_with(".so") {
                Entry::Hash(hash_file(&path)?)
            } else {
                Entry::Len(fs::metadata(&path)?.len())
            };
            out.push((deps.join(&name).to_string_lossy().into_owned(), entry));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn entry_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

/// What a session compiled for its cells, never part of the engine.
pub(super) fn is_cells_own(name: &str) -> bool {
    name == "incremental"
        || name.starts_with("ctx-")
        || name.starts_with("libctx")
        || name.starts_with("libcode_")
}

/// FNV-1a over the file's bytes: fast, and the same in every build of placelab.
fn hash_file(path: &Path) -> io::Result<u64> {
    let mut file = fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 16];
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(h);
        }
        for &b in &buf[..n] {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(root: &Path, files: &[(&str, &[u8])]) {
        for (path, bytes) in files {
            let p = root.join(path);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, bytes).unwrap();
        }
    }

    #[test]
    fn a_build_is_linked_only_while_it_is_the_one_its_manifest_names() {
        let base = std::env::temp_dir().join(format!("placelab-manifest-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let build = base.join("work");
        tree(
            &build,
            &[
                (
                    "target/debug/deps/libbytemuck_derive-1.so",
                    b"proc macro, build A",
                ),
                ("target/debug/deps/bytemuck_derive-1.d", b"dep-info"),
                (
                    "target/x86_64-unknown-linux-gnu/debug/deps/libhalf-2.rmeta",
                    b"meta",
                ),
                (
                    "target/x86_64-unknown-linux-gnu/debug/deps/libctx-9.so",
                    b"a cell",
                ),
            ],
        );
        let expected = Expected {
            toolchain: "release: 1.95.0 commit-hash: abc".into(),
            sources: "/src/placelab".into(),
            cuda: 13,
        };
        assert!(
            verify(&build, &expected)
                .unwrap_err()
                .contains("no manifest")
        );
        write(&build, &expected).unwrap();
        assert_eq!(verify(&build, &expected), Ok(()));
        let manifest = fs::read_to_string(build.join(MANIFEST)).unwrap();
        assert!(
            !manifest.contains("libctx"),
            "a session's cells are not the engine"
        );
        assert!(!manifest.contains(".d\n"), "dep-info is cargo's to check");

        // The same proc macro from another build: same name and length, other bytes.
        let mac = build.join("target/debug/deps/libbytemuck_derive-1.so");
        fs::write(&mac, b"proc macro, build B").unwrap();
        let why = verify(&build, &expected).unwrap_err();
        assert!(
            why.contains("libbytemuck_derive-1.so is not the file"),
            "{why}"
        );
        fs::write(&mac, b"proc macro, build A").unwrap();

        // A truncated target artefact, then a deleted one.
        let meta = build.join("target/x86_64-unknown-linux-gnu/debug/deps/libhalf-2.rmeta");
        fs::write(&meta, b"me").unwrap();
        assert!(
            verify(&build, &expected)
                .unwrap_err()
                .contains("libhalf-2.rmeta")
        );
        fs::remove_file(&meta).unwrap();
        assert!(
            verify(&build, &expected)
                .unwrap_err()
                .contains("is missing")
        );
        fs::write(&meta, b"meta").unwrap();
        assert_eq!(verify(&build, &expected), Ok(()));

        let _ = fs::remove_dir_all(&base);
    }

    #[test]
    fn a_build_of_another_toolchain_or_clone_is_not_linked() {
        let base =
            std::env::temp_dir().join(format!("placelab-manifest-of-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let build = base.join("work");
        tree(
            &build,
            &[("target/debug/deps/libpaste-1.so", b"proc macro")],
        );
        let expected = Expected {
            toolchain: "release: 1.95.0 commit-hash: abc".into(),
            sources: "/src/placelab".into(),
            cuda: 13,
        };
        write(&build, &expected).unwrap();
        let other = Expected {
            toolchain: "release: 1.96.0 commit-hash: def".into(),
            sources: expected.sources.clone(),
            cuda: 13,
        };
        assert!(
            verify(&build, &other)
                .unwrap_err()
                .contains("another Rust toolchain")
        );
        let moved = Expected {
            toolchain: expected.toolchain.clone(),
            sources: "/elsewhere".into(),
            cuda: 13,
        };
        assert!(verify(&build, &moved).unwrap_err().contains("/elsewhere"));
        // The major is recorded (a session for CUDA 12 links to it, and compiles the engine
        // crate again), and a manifest from before the line is a CUDA 13 build.
        assert_eq!(built_for_cuda(&build), 13);
        let manifest = build.join(MANIFEST);
        let text = fs::read_to_string(&manifest).unwrap();
        write(
            &build,
            &Expected {
                cuda: 12,
                ..Expected::now(None, 12)
            },
        )
        .unwrap();
        assert_eq!(built_for_cuda(&build), 12);
        fs::write(&manifest, text.replace("cuda 13\n", "")).unwrap();
        assert_eq!(built_for_cuda(&build), 13);
        assert_eq!(verify(&build, &expected), Ok(()));
        let _ = fs::remove_dir_all(&base);
    }
}
