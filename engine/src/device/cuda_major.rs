//! The CUDA major this build of the engine is for. cudarc fixes it at compile time (the
//! `cuda-12` or `cuda-13` feature), and one build can use only that major's NVRTC and cuBLAS: a
//! session builds the engine for the major its machine's driver and libraries allow (the front
//! end's `cuda_choice`), and this build loads no library of the other.

/// 13 with the feature `cuda-13` (the default), 12 with `cuda-12` alone.
pub const CUDA_MAJOR: u32 = if cfg!(feature = "cuda-13") { 13 } else { 12 };

#[cfg(not(any(feature = "cuda-12", feature = "cuda-13")))]
compile_error!(
    "placelab needs a CUDA major: build it with the feature cuda-13 (the default) or cuda-12"
);

/// The pip command that installs `major`'s NVRTC and cuBLAS (PyTorch's wheels bring the same).
pub fn pip_install(major: u32) -> String {
    match major {
        12 => "pip install nvidia-cuda-nvrtc-cu12 nvidia-cublas-cu12".into(),
        m => format!("pip install \"nvidia-cuda-nvrtc=={m}.*\" \"nvidia-cublas=={m}.*\""),
    }
}

/// Where those wheels put their libraries, under a Python's `site-packages`.
pub fn wheel_folders(major: u32) -> &'static [&'static str] {
    match major {
        12 => &["nvidia/cuda_nvrtc/lib", "nvidia/cublas/lib"],
        _ => &["nvidia/cu13/lib"],
    }
}

/// How to get `major`'s libraries, in a sentence: the toolkit or the wheels, and where the
/// wheels' folder is when it is not found by itself.
pub fn install_hint(major: u32) -> String {
    format!(
        "install the CUDA {major} toolkit, or the wheels (`{}`) and, if placelab does not find \
         them, point PLACELAB_CUDA_LIB_DIRS at their lib folder (site-packages/{})",
        pip_install(major),
        wheel_folders(major).join(", site-packages/")
    )
}

/// Whether the library file `name` is `prefix` of `major`: `libnvrtc.so.12` or
/// `libnvrtc.so.12.8.93` for (`libnvrtc.so.`, 12), not `libnvrtc.so.13` nor
/// `libnvrtc.alt.so.12`.
pub fn is_library_of(name: &str, prefix: &str, major: u32) -> bool {
    let Some(version) = name.strip_prefix(prefix) else {
        return false;
    };
    let mut parts = version.split('.');
    parts.next() == Some(&major.to_string())
        && parts.all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_file_is_of_its_own_major_only() {
        assert!(is_library_of("libnvrtc.so.12", "libnvrtc.so.", 12));
        assert!(is_library_of(
            "libnvrtc-builtins.so.12.8",
            "libnvrtc-builtins.so.",
            12
        ));
        assert!(!is_library_of("libnvrtc.so.13", "libnvrtc.so.", 12));
        assert!(!is_library_of("libnvrtc.so.1", "libnvrtc.so.", 12));
        assert!(!is_library_of("libnvrtc.so.12.", "libnvrtc.so.", 12));
        assert!(!is_library_of("libnvrtc.alt.so.12", "libnvrtc.so.", 12));
        assert!(!is_library_of(
            "libnvrtc-builtins.so.12.8",
            "libnvrtc.so.",
            12
        ));
    }
}
