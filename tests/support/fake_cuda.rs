//! Made-up CUDA installations, for the tests of the CUDA major a session chooses: a
//! `libcuda.so.1` that reports a driver version and one GPU, and NVRTC, cuBLAS and cuBLASLt
//! files that report a version, each compiled from a few lines of C by the system's `cc`. They
//! answer what the probe asks (`src/cuda_probe.rs`) and nothing else: a process must never run
//! a kernel with them.

use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = r#"
int cuDriverGetVersion(int *v) { *v = DRIVER; return 0; }
int cuInit(unsigned flags) { return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *device, int ordinal) { *device = ordinal; return 0; }
/* Compute capability 9.0: attribute 75 is its major, 76 its minor. */
int cuDeviceGetAttribute(int *v, int attribute, int device) { *v = attribute == 75 ? 9 : 0; return 0; }
int nvrtcVersion(int *major, int *minor) { *major = MAJOR; *minor = MINOR; return 0; }
/* Property 0 is MAJOR_VERSION, 1 MINOR_VERSION. */
int cublasGetProperty(int type, int *v) { *v = type == 0 ? MAJOR : MINOR; return 0; }
int cublasLtGetProperty(int type, int *v) { *v = type == 0 ? MAJOR : MINOR; return 0; }
"#;

/// A folder under `root` named `name`, made afresh.
fn folder(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a folder for the made-up CUDA");
    dir
}

/// Compiles `SOURCE` to `dir/file` with the soname `file` and these definitions.
fn compile(dir: &Path, file: &str, defines: &[String]) {
    let source = dir.join("fake.c");
    std::fs::write(&source, SOURCE).expect("the made-up library's source");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join(file))
        .arg(format!("-Wl,-soname,{file}"))
        .args(defines)
        .arg(&source)
        .status()
        .expect("a C compiler (cc) for the made-up CUDA libraries");
    assert!(status.success(), "cc failed on {file}");
}

/// A folder holding a `libcuda.so.1` whose driver supports CUDA `major.minor`.
pub fn driver(root: &Path, (major, minor): (u32, u32)) -> PathBuf {
    let dir = folder(root, &format!("driver-{major}.{minor}"));
    let version = major * 1000 + minor * 10;
    compile(
        &dir,
        "libcuda.so.1",
        &[
            format!("-DDRIVER={version}"),
            "-DMAJOR=0".into(),
            "-DMINOR=0".into(),
        ],
    );
    dir
}

/// A folder holding NVRTC, cuBLAS and cuBLASLt of CUDA `major.minor`, named as a wheel names
/// them (`libnvrtc.so.12`).
pub fn libraries(root: &Path, (major, minor): (u32, u32)) -> PathBuf {
    let dir = folder(root, &format!("cu{major}.{minor}"));
    for name in ["nvrtc", "cublas", "cublasLt"] {
        compile(
            &dir,
            &format!("lib{name}.so.{major}"),
            &[
                "-DDRIVER=0".into(),
                format!("-DMAJOR={major}"),
                format!("-DMINOR={minor}"),
            ],
        );
    }
    dir
}

/// Adds to `dir` an unversioned `libnvrtc.so` of CUDA `major`, as a toolkit's development link
/// would be: the first name cudarc's loader tries, whatever major it is built for.
pub fn unversioned_nvrtc(dir: &Path, major: u32) {
    compile(
        dir,
        "libnvrtc.so",
        &[
            "-DDRIVER=0".into(),
            format!("-DMAJOR={major}"),
            "-DMINOR=0".into(),
        ],
    );
}
