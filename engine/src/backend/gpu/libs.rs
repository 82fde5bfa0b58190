//! Finding CUDA's libraries outside the loader path. cudarc opens `libnvrtc.so.13`,
//! `libcublas.so.13` … by name; a library already loaded under that name (its soname) is what
//! `dlopen` returns, so loading one by full path first makes cudarc use it. That lets the pip
//! wheels (`nvidia-cuda-nvrtc`, PyTorch's `nvidia/cu13/lib`) serve without `LD_LIBRARY_PATH`.
//! Only the libraries of the major this engine is built for (`CUDA_MAJOR`) are loaded: a folder
//! may hold both.

use std::path::Path;
use std::sync::{Mutex, OnceLock};

use crate::device::cuda_major::{CUDA_MAJOR, is_library_of};

/// The libraries looked for, in load order (NVRTC opens its builtins by name; cuBLAS needs
/// cuBLASLt).
const LIBRARIES: [&str; 4] = [
    "libnvrtc-builtins.so.",
    "libnvrtc.so.",
    "libcublasLt.so.",
    "libcublas.so.",
];

fn loaded_dirs() -> &'static Mutex<Vec<std::path::PathBuf>> {
    static DIRS: OnceLock<Mutex<Vec<std::path::PathBuf>>> = OnceLock::new();
    DIRS.get_or_init(Default::default)
}

/// Loads the CUDA libraries found in `dir` (once per folder), so that later uses of NVRTC and
/// cuBLAS find them. Returns the file names it loaded.
pub fn use_library_dir(dir: &Path) -> Vec<String> {
    let mut seen = loaded_dirs().lock().unwrap_or_else(|e| e.into_inner());
    if seen.iter().any(|d| d == dir) {
        return Vec::new();
    }
    seen.push(dir.to_path_buf());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    let mut loaded = Vec::new();
    for prefix in LIBRARIES {
        // `libnvrtc.so.13`, not `libnvrtc.alt.so.13` nor `libnvrtc.so.12`.
        for name in names
            .iter()
            .filter(|n| is_library_of(n, prefix, CUDA_MAJOR))
        {
            let path = std::ffi::CString::new(dir.join(name).as_os_str().as_encoded_bytes())
                .expect("a path without NUL");
            // SAFETY: dlopen of a CUDA library, kept loaded for the life of the process.
            let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            if !handle.is_null() {
                loaded.push(name.clone());
            }
        }
    }
    loaded
}

/// Loads the libraries of every folder in `PLACELAB_CUDA_LIB_DIRS` (`:`-separated), once.
pub fn preload() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        if let Some(dirs) = std::env::var_os("PLACELAB_CUDA_LIB_DIRS") {
            for dir in std::env::split_paths(&dirs) {
                use_library_dir(&dir);
            }
        }
    });
}
