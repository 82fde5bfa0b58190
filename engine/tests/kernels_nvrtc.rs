//! The CUDA kernel sources compile with NVRTC, for every architecture placelab targets, on a
//! machine without a GPU: NVRTC comes from the `nvidia-cuda-nvrtc` wheel, installed into a venv
//! under `target/` (or from `PLACELAB_CUDA_LIB_DIRS` when set).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use placelab::Error;
use placelab::cuda::cuda_major::CUDA_MAJOR;
use placelab::gpu::launch::{KERNELS, Param};
use placelab::gpu::{libs, nvrtc};

#[path = "support/venv.rs"]
mod venv;

/// The NVRTC wheel of the major this engine is built for (`--features cuda-12` builds CUDA 12's),
/// its library folder inside `site-packages`, and the venv under `target/` it goes into.
const WHEEL: &str = if CUDA_MAJOR == 12 {
    "nvidia-cuda-nvrtc-cu12==12.8.93"
} else {
    "nvidia-cuda-nvrtc==13.0.88"
};
const WHEEL_LIB: &str = if CUDA_MAJOR == 12 {
    "nvidia/cuda_nvrtc/lib"
} else {
    "nvidia/cu13/lib"
};
const VENV: &str = if CUDA_MAJOR == 12 {
    "../target/nvrtc12-venv"
} else {
    "../target/nvrtc-venv"
};

/// Makes NVRTC loadable (from the system, or from the wheel), or fails the test saying why.
/// There is no switch that skips these tests, so a run that did not compile the kernels never
/// passes: PyPI must be reachable, or NVRTC installed (`PLACELAB_CUDA_LIB_DIRS`).
///
/// Returns where CUBINs compiled by the wheel's NVRTC may be kept: in its venv, which is made
/// again, empty, when the wheel's pin changes (none for a system NVRTC). The first test to call
/// it decides, and the others wait for that.
fn load_nvrtc() -> Option<PathBuf> {
    static KEPT: OnceLock<Option<PathBuf>> = OnceLock::new();
    KEPT.get_or_init(|| {
        libs::preload();
        if nvrtc::version().is_ok() {
            return None;
        }
        let lib = wheel_lib_dir();
        libs::use_library_dir(&lib);
        let v = nvrtc::version();
        assert!(
            v.is_ok(),
            "NVRTC from {} did not load: {v:?}",
            lib.display()
        );
        lib.ancestors()
            .find(|d| d.ends_with(Path::new(VENV).file_name().unwrap()))
            .map(|venv| venv.join("cubins"))
    })
    .clone()
}

/// The wheel's lib folder, installing the wheel into `target/nvrtc-venv` on first use.
///
/// The tests of this binary run on parallel threads: one installs while the others wait, and
/// none loads the library before the install is complete (loading a `.so` that pip is still
/// writing ends the process with SIGBUS).
fn wheel_lib_dir() -> PathBuf {
    static INSTALLED: OnceLock<PathBuf> = OnceLock::new();
    INSTALLED.get_or_init(install_wheel).clone()
}

fn install_wheel() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(VENV);
    let lib = || {
        std::fs::read_dir(venv.join("lib"))
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("site-packages").join(WHEEL_LIB))
            .find(|p| p.join(format!("libnvrtc.so.{CUDA_MAJOR}")).exists())
    };
    // The venv's marker records WHEEL, so a changed pin makes the venv again.
    let mut made = venv::pinned_venv(&venv, WHEEL, &[WHEEL.as_ref()]);
    if made.is_ok() && lib().is_none() {
        // Marked complete, but the library is gone: make it again.
        let _ = std::fs::remove_dir_all(&venv);
        made = venv::pinned_venv(&venv, WHEEL, &[WHEEL.as_ref()]);
    }
    match (made, lib()) {
        (Ok(_), Some(lib)) => lib,
        (made, _) => panic!(
            "could not install {WHEEL} into {} (needs python3 and PyPI, or NVRTC in \
             PLACELAB_CUDA_LIB_DIRS): {}",
            venv.display(),
            made.err()
                .unwrap_or_else(|| format!("the wheel has no libnvrtc.so.{CUDA_MAJOR}"))
        ),
    }
}

#[test]
fn every_kernel_file_compiles_for_every_target_architecture() {
    // The wheel's CUBINs are kept as placelab keeps them for a GPU: under a name that hashes the
    // source, the architecture and NVRTC's version, so a run reuses only a compile of the same
    // program by the same NVRTC. CI keeps target/ between runs on a machine
    // (.ci/warm-target.sh): these 25 compiles, about 150 CPU-s, then run once per kernel change.
    let kept = load_nvrtc();
    let (major, _) = nvrtc::version().unwrap();
    assert_eq!(
        major, CUDA_MAJOR as i32,
        "the kernels are built against the NVRTC of the engine's major"
    );
    // Volta (CUDA 12 only: 13 dropped it), Turing, Ampere, Ada, Hopper, Blackwell.
    let volta = [("sm_70", (7, 0))];
    for (arch, cc) in volta[..usize::from(CUDA_MAJOR == 12)]
        .iter()
        .copied()
        .chain([
            ("sm_75", (7, 5)),
            ("sm_80", (8, 0)),
            ("sm_89", (8, 9)),
            ("sm_90", (9, 0)),
            ("sm_100", (10, 0)),
        ])
    {
        for src in nvrtc::SOURCES {
            let cubin = nvrtc::cubin_cached_in(&src, cc, kept.as_deref())
                .unwrap_or_else(|e| panic!("{} for {arch}: {e}", src.name));
            assert_eq!(
                &cubin[..4],
                b"\x7fELF",
                "{} for {arch} is not a CUBIN",
                src.name
            );
        }
    }
}

/// Each `.entry` of a PTX text with its parameters.
fn entries(ptx: &str) -> Vec<(String, Vec<Param>)> {
    let mut out: Vec<(String, Vec<Param>)> = Vec::new();
    let mut open = false;
    for line in ptx.lines().map(str::trim) {
        if let Some(rest) = line.split(".entry ").nth(1) {
            out.push((rest.trim_end_matches('(').to_string(), Vec::new()));
            open = true;
        } else if open && line.starts_with(".param") {
            let words: Vec<&str> = line.split_whitespace().collect();
            let param = match words[1] {
                ".u64" => Param::U64,
                ".u32" => Param::U32,
                ".f32" => Param::F32,
                ".align" => Param::Struct {
                    align: words[2].parse().unwrap(),
                    bytes: words[4]
                        .rsplit_once('[')
                        .and_then(|(_, n)| n.trim_end_matches([']', ',']).parse().ok())
                        .unwrap(),
                },
                other => panic!("a kernel parameter of PTX type {other}: {line}"),
            };
            out.last_mut().unwrap().1.push(param);
        } else if line.starts_with(')') {
            open = false;
        }
    }
    out
}

/// Every kernel the engine launches exists, for every dtype it is launched with, and takes the
/// parameters its launcher passes (count, order, width, and the by-value `Strided` view's size
/// and alignment); and every kernel in `kernels/` is one the engine launches.
#[test]
fn launchers_match_the_compiled_kernels_parameter_for_parameter() {
    load_nvrtc();
    let mut compiled: Vec<(String, Vec<Param>)> = Vec::new();
    for src in nvrtc::SOURCES {
        let ptx = nvrtc::compile_ptx(src.name, &src.program(), "sm_90").unwrap();
        compiled.extend(entries(&ptx));
    }
    assert!(compiled.len() > 50, "found only {} kernels", compiled.len());
    let mut launched = Vec::new();
    for k in KERNELS {
        for suffix in k.suffixes {
            let name = format!("{}_{suffix}", k.family);
            let Some((_, params)) = compiled.iter().find(|(n, _)| *n == name) else {
                panic!("no kernel {name} in {}", k.source.name);
            };
            assert_eq!(params, k.params, "{name}: the launcher's arguments differ");
            launched.push(name);
        }
    }
    for (name, _) in &compiled {
        assert!(
            launched.contains(name),
            "{name} is compiled but never launched"
        );
    }
}

#[test]
fn a_compile_error_carries_nvrtcs_log_with_file_and_line() {
    load_nvrtc();
    let src = "extern \"C\" __global__ void k(float* x) {\n    x[0] = y;\n}\n";
    let err = nvrtc::compile("broken.cu", src, "sm_90").unwrap_err();
    match &err {
        Error::KernelCompile { kernel, arch, log } => {
            assert_eq!((kernel.as_str(), arch.as_str()), ("broken.cu", "sm_90"));
            assert!(log.contains("broken.cu(2)"), "{log}");
            assert!(log.contains("identifier \"y\" is undefined"), "{log}");
        }
        e => panic!("expected a KernelCompile error, got {e:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("NVRTC failed to compile") && msg.contains("kernels/"),
        "{msg}"
    );
}

#[test]
fn compiled_kernels_are_cached_on_disk_by_source_arch_and_version() {
    load_nvrtc();
    let dir = tempdir();
    let first = nvrtc::cubin_cached_in(&nvrtc::COPY, (8, 0), Some(&dir)).unwrap();
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(files.len(), 1);
    let name = files[0]
        .as_ref()
        .unwrap()
        .file_name()
        .into_string()
        .unwrap();
    assert!(
        name.starts_with(&format!("copy-sm_80-nvrtc{CUDA_MAJOR}.")) && name.ends_with(".cubin"),
        "{name}"
    );
    // The second call reads the file: a changed file is what it returns.
    let path = files[0].as_ref().unwrap().path();
    std::fs::write(&path, b"cached").unwrap();
    assert_eq!(
        nvrtc::cubin_cached_in(&nvrtc::COPY, (8, 0), Some(&dir)).unwrap(),
        b"cached"
    );
    assert_eq!(&first[..4], b"\x7fELF");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn devices_compiling_the_same_kernels_at_once_leave_one_whole_cache_file() {
    load_nvrtc();
    let dir = std::env::temp_dir().join(format!("placelab-at-once-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Four GPUs' first use at the same moment: each compiles, and each writes the cache.
    let cubins: Vec<Vec<u8>> = std::thread::scope(|s| {
        let compiles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| nvrtc::cubin_cached_in(&nvrtc::COPY, (9, 0), Some(&dir))))
            .collect();
        compiles
            .into_iter()
            .map(|c| c.join().unwrap().unwrap())
            .collect()
    });
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        names.len(),
        1,
        "one cache file, no temporaries left: {names:?}"
    );
    let cached = std::fs::read(dir.join(&names[0])).unwrap();
    assert!(
        cubins.iter().all(|c| *c == cached),
        "every device got the whole CUBIN"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("placelab-kernels-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A GPU the installed NVRTC does not compile for gets what NVRTC knows and the fix, before any
/// compile: a newer GPU than it knows, and one older than its major supports.
#[test]
fn an_architecture_nvrtc_does_not_know_is_refused_with_the_fix() {
    load_nvrtc();
    let archs = nvrtc::supported_archs().unwrap();
    assert!(archs.contains(&90), "{archs:?}");
    let refused = |arch: &str| match nvrtc::compile(nvrtc::COPY.name, &nvrtc::COPY.program(), arch)
    {
        Err(Error::KernelCompile { log, .. }) => log,
        other => panic!("{arch} was compiled: {other:?}"),
    };
    let newer = refused("sm_990");
    assert!(newer.contains("not for this GPU's sm_990"), "{newer}");
    assert!(newer.contains("--upgrade"), "{newer}");
    let older = refused("sm_30");
    assert!(older.contains("not for this GPU's sm_30"), "{older}");
    assert!(older.contains("do not support a GPU this old"), "{older}");
    if CUDA_MAJOR == 13 {
        // Volta: CUDA 12 still compiles for it.
        assert!(refused("sm_70").contains("nvidia-cuda-nvrtc-cu12"));
    }
}
