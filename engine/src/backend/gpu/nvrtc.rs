//! The CUDA kernels of `kernels/*.cu`, compiled at run time by NVRTC for one GPU architecture
//! (the build never needs nvcc) and cached on disk, keyed by the source's hash, the
//! architecture and NVRTC's version. NVRTC's log reaches the user when a compile fails.

use std::ffi::{CString, c_char};

use cudarc::nvrtc::{result, sys};

use crate::device::cuda_major::{CUDA_MAJOR, install_hint, pip_install};
use crate::device::error::{Error, Result};
use crate::device::guard::guarded;

/// Text placed before every kernel file: the op codes the kernels switch on (`PL_BINARY_ADD` …),
/// which `build.rs` writes from `kernels/codes.rs` for the host build too.
const OPS: &str = include_str!(concat!(env!("OUT_DIR"), "/kernels/ops.cuh"));

/// Text placed before every kernel file, after `OPS`: element types, conversions and strided
/// indexing.
const COMMON: &str = include_str!("../../../../kernels/common.cuh");

/// One kernel file of `kernels/`.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    pub name: &'static str,
    pub text: &'static str,
}

/// The kernel file `kernels/NAME`, its text compiled into the engine.
macro_rules! kernel_file {
    ($name:literal) => {
        KernelSource {
            name: $name,
            text: include_str!(concat!("../../../../kernels/", $name)),
        }
    };
}

pub const ELEMENTWISE: KernelSource = kernel_file!("elementwise.cu");
pub const COPY: KernelSource = kernel_file!("copy.cu");
pub const GATHER: KernelSource = kernel_file!("gather.cu");
pub const REDUCE: KernelSource = kernel_file!("reduce.cu");
pub const OPTIM: KernelSource = kernel_file!("optim.cu");
pub const RANDOM: KernelSource = kernel_file!("random.cu");

/// Every kernel file the engine launches from.
pub const SOURCES: [KernelSource; 6] = [ELEMENTWISE, COPY, GATHER, REDUCE, OPTIM, RANDOM];

/// Headers `build.rs` writes that a kernel file includes. NVRTC has no include path here: each
/// `#include` of one is replaced by its text.
const GENERATED_HEADERS: &[(&str, &str)] = &[(
    "random_tables.cuh",
    include_str!(concat!(env!("OUT_DIR"), "/kernels/random_tables.cuh")),
)];

impl KernelSource {
    /// What NVRTC compiles: the op codes, the common header, then the file, with `#line` so that
    /// errors name the file and line of `kernels/` (or `ops.cuh`, in the build's output).
    pub fn program(&self) -> String {
        let mut text = String::new();
        for (n, line) in self.text.lines().enumerate() {
            let included = GENERATED_HEADERS
                .iter()
                .find(|(name, _)| line.trim() == format!("#include \"{name}\""));
            match included {
                // The header's text, then the file's numbering again for NVRTC's messages.
                Some((_, header)) => {
                    text += &format!("{header}\n#line {} \"{}\"\n", n + 2, self.name)
                }
                None => text += &format!("{line}\n"),
            }
        }
        format!(
            "#line 1 \"ops.cuh\"\n{OPS}\n#line 1 \"common.cuh\"\n{COMMON}\n#line 1 \"{}\"\n{text}",
            self.name
        )
    }
}

/// NVRTC's version, e.g. `(13, 0)`, or why NVRTC cannot be used: it is not installed, or the
/// one the loader found is of another CUDA major than this engine's bindings.
pub fn version() -> std::result::Result<(i32, i32), String> {
    super::libs::preload();
    if !unsafe { sys::is_culib_present() } {
        return Err(format!(
            "NVRTC (libnvrtc.so.{CUDA_MAJOR}) is not installed; {}",
            install_hint(CUDA_MAJOR)
        ));
    }
    let (major, minor) = guarded("loading NVRTC", || {
        let (mut major, mut minor) = (0, 0);
        let status = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
        (status == sys::nvrtcResult::NVRTC_SUCCESS).then_some((major, minor))
    })?
    .ok_or_else(|| "nvrtcVersion failed".to_string())?;
    if major != CUDA_MAJOR as i32 {
        return Err(format!(
            "the NVRTC the loader found is {major}.{minor}, and this engine is built for CUDA \
             {CUDA_MAJOR}; {}",
            install_hint(CUDA_MAJOR)
        ));
    }
    Ok((major, minor))
}

/// `source` compiled to a CUBIN for `sm_{major}{minor}`, from the disk cache in
/// `cache_dir()/kernels` when it has it (`PLACELAB_NO_KERNEL_CACHE` turns the cache off).
pub fn cubin(source: &KernelSource, cc: (i32, i32)) -> Result<Vec<u8>> {
    cubin_cached_in(source, cc, cache_dir().as_deref())
}

fn cache_dir() -> Option<std::path::PathBuf> {
    std::env::var_os("PLACELAB_NO_KERNEL_CACHE")
        .is_none()
        .then(|| crate::base::cache::cache_dir().join("kernels"))
}

/// Removes `source`'s cached CUBIN for `sm_{major}{minor}`, so that the next `cubin` compiles it.
pub fn forget_cached(source: &KernelSource, (major, minor): (i32, i32)) {
    if let (Some(dir), Ok(nvrtc)) = (cache_dir(), version()) {
        let arch = format!("sm_{major}{minor}");
        let _ = std::fs::remove_file(dir.join(cache_file(
            source.name,
            &source.program(),
            &arch,
            nvrtc,
        )));
    }
}

/// `cubin` with the disk cache in `dir` (none: always compile).
pub fn cubin_cached_in(
    source: &KernelSource,
    (major, minor): (i32, i32),
    dir: Option<&std::path::Path>,
) -> Result<Vec<u8>> {
    let arch = format!("sm_{major}{minor}");
    // Not installed is not a compile error: say what to install, not which line to fix.
    let nvrtc = version().map_err(|what| Error::LibraryMissing { what })?;
    let program = source.program();
    let path = dir.map(|d| d.join(cache_file(source.name, &program, &arch, nvrtc)));
    if let Some(bytes) = path.as_ref().and_then(|p| std::fs::read(p).ok()) {
        return Ok(bytes);
    }
    let bytes = compile(source.name, &program, &arch)?;
    if let Some(p) = path {
        // A cache that cannot be written only costs a recompile next time.
        let _ = std::fs::create_dir_all(p.parent().expect("a file in a folder"));
        // A name no other writer uses (two GPUs, or two processes, may compile the same file at
        // once); the rename then replaces the cache file in one step.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = p.with_extension(format!("tmp{}-{n}", std::process::id()));
        if std::fs::write(&tmp, &bytes).is_ok() {
            let _ = std::fs::rename(&tmp, &p);
        }
    }
    Ok(bytes)
}

/// Compiles `program` (named `name` in messages) for `arch` (`sm_90`) to a CUBIN: NVRTC runs the
/// whole pipeline down to machine code, so errors surface here rather than at module load.
pub fn compile(name: &str, program: &str, arch: &str) -> Result<Vec<u8>> {
    compile_with(name, program, arch, read_cubin)
}

/// Compiles `program` for `arch` and returns the PTX NVRTC made on the way: readable text that
/// declares each kernel's parameters (the tests check the launchers against it).
pub fn compile_ptx(name: &str, program: &str, arch: &str) -> Result<String> {
    let ptx = compile_with(name, program, arch, |prog| {
        let text = unsafe { result::get_ptx(prog) }.map_err(|e| e.to_string())?;
        Ok(c_chars_to_string(&text).into_bytes())
    })?;
    Ok(String::from_utf8_lossy(&ptx).into_owned())
}

fn compile_with(
    name: &str,
    program: &str,
    arch: &str,
    read: impl FnOnce(sys::nvrtcProgram) -> std::result::Result<Vec<u8>, String>,
) -> Result<Vec<u8>> {
    let fail = |log: String| Error::KernelCompile {
        kernel: name.into(),
        arch: arch.into(),
        log,
    };
    let nvrtc = version().map_err(fail)?;
    if let Some(why) = arch_unsupported(arch, nvrtc) {
        return Err(fail(why));
    }
    let src = CString::new(program).map_err(|_| fail("the source contains a NUL byte".into()))?;
    let cname = CString::new(name).map_err(|_| fail("the name contains a NUL byte".into()))?;
    let options = [
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
    ];
    guarded("NVRTC", || -> std::result::Result<Vec<u8>, String> {
        let prog = result::create_program(&src, Some(&cname)).map_err(|e| e.to_string())?;
        let compiled = unsafe { result::compile_program(prog, &options) };
        let out = match compiled {
            Ok(()) => read(prog),
            Err(e) => Err(program_log(prog).unwrap_or_else(|| e.to_string())),
        };
        unsafe {
            let _ = result::destroy_program(prog);
        }
        out
    })
    .map_err(fail)?
    .map_err(fail)
}

/// The architectures this NVRTC compiles for (`nvrtcGetSupportedArchs`: 75 for `sm_75` …).
pub fn supported_archs() -> std::result::Result<Vec<i32>, String> {
    version()?;
    guarded("asking NVRTC's architectures", || {
        let mut n = 0;
        if unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) } != sys::nvrtcResult::NVRTC_SUCCESS {
            return None;
        }
        let mut archs = vec![0; n.max(0) as usize];
        let status = unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) };
        (status == sys::nvrtcResult::NVRTC_SUCCESS).then_some(archs)
    })?
    .ok_or_else(|| "nvrtcGetSupportedArchs failed".into())
}

/// Why NVRTC `nvrtc` cannot compile for `arch` (`sm_100`), in words with the fix; `None` when it
/// can, or when it cannot say (its own error then tells).
fn arch_unsupported(arch: &str, (major, minor): (i32, i32)) -> Option<String> {
    let wanted: i32 = arch.strip_prefix("sm_")?.parse().ok()?;
    let archs = supported_archs().ok()?;
    if archs.contains(&wanted) {
        return None;
    }
    let (oldest, newest) = (archs.iter().min()?, archs.iter().max()?);
    let fix = if wanted > *newest {
        format!(
            "a newer CUDA {CUDA_MAJOR} NVRTC knows newer GPUs (`{} --upgrade`)",
            pip_install(CUDA_MAJOR)
        )
    } else if CUDA_MAJOR >= 13 && wanted >= 50 {
        format!(
            "CUDA 12 still compiles for it: with CUDA 12's NVRTC and cuBLAS (`{}`), placelab \
             builds its engine for CUDA 12",
            pip_install(12)
        )
    } else {
        "placelab's CUDA 12 and 13 builds do not support a GPU this old".to_string()
    };
    Some(format!(
        "NVRTC {major}.{minor} compiles for sm_{oldest} to sm_{newest}, not for this GPU's {arch}: \
         {fix}"
    ))
}

/// A NUL-terminated C string from NVRTC as text.
fn c_chars_to_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn program_log(prog: sys::nvrtcProgram) -> Option<String> {
    let log = unsafe { result::get_program_log(prog) }.ok()?;
    Some(c_chars_to_string(&log))
}

fn read_cubin(prog: sys::nvrtcProgram) -> std::result::Result<Vec<u8>, String> {
    let mut size = 0usize;
    let status = unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) };
    if status != sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
        return Err(format!("NVRTC produced no CUBIN ({status:?})"));
    }
    let mut buf = vec![0u8; size];
    let status = unsafe { sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char) };
    if status != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(format!("nvrtcGetCUBIN failed ({status:?})"));
    }
    Ok(buf)
}

/// FNV-1a: a hash that stays the same across Rust releases, so the disk cache survives them.
fn stable_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `cast-sm_90-nvrtc13.0-<hash of the program>.cubin`.
fn cache_file(name: &str, program: &str, arch: &str, (ma, mi): (i32, i32)) -> String {
    let stem = name.trim_end_matches(".cu");
    let hash = stable_hash(program.as_bytes());
    format!("{stem}-{arch}-nvrtc{ma}.{mi}-{hash:016x}.cubin")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where NVRTC is not installed (this test process loads none unless the machine has it), a
    /// kernel's first use says what to install, not "fix the line NVRTC names".
    #[test]
    fn without_nvrtc_a_kernel_asks_for_the_library() {
        let Err(why) = version() else {
            return; // NVRTC is installed here: nothing to check.
        };
        let e = cubin_cached_in(&ELEMENTWISE, (9, 0), None).unwrap_err();
        assert!(matches!(e, Error::LibraryMissing { .. }), "{e:?}");
        assert_eq!(e.to_string(), why);
        assert!(why.contains("PLACELAB_CUDA_LIB_DIRS"), "{why}");
    }
}
