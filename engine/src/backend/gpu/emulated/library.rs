//! The kernel library the emulator runs: the one `build.rs` linked into placelab, or the shared
//! library `PLACELAB_EMULATOR_KERNELS` names, built by `.ci/kernel-library.py` from the same
//! sources with one change (a mutant the tests must catch) or under AddressSanitizer. Loading it
//! at run time lets `.ci/emulator-checks` try each variant on test binaries already built, where
//! a variant compiled in would rebuild placelab and every test binary.

use std::ffi::{CStr, CString, c_char, c_void};
use std::path::Path;
use std::sync::OnceLock;

/// Names the shared library to run instead of the kernels linked in.
const VAR: &str = "PLACELAB_EMULATOR_KERNELS";

/// A kernel's entry: runs one CUDA thread's body with the launch's argument array.
pub(crate) type Invoke = unsafe extern "C" fn(*mut *mut c_void);

/// `pl_param` in `kernels/host/registry.h`.
#[repr(C)]
pub(super) struct RawParam {
    pub kind: u32,
    pub size: u32,
    pub align: u32,
}

/// `pl_kernel` in `kernels/host/registry.h`.
#[repr(C)]
pub(super) struct RawKernel {
    pub name: *const c_char,
    pub invoke: Invoke,
    pub nparams: u32,
    pub params: *const RawParam,
}

/// `placelab_emu_table`: the i-th generated table of kernels and its length (null past the last).
type TableFn = unsafe extern "C" fn(usize, *mut usize) -> *const RawKernel;
/// `placelab_emu_run_block`: one block of a launch (its grid, block size and index); non-zero
/// with a message in the buffer when a thread failed.
type RunBlockFn = unsafe extern "C" fn(
    Invoke,
    *mut *mut c_void,
    *const u32,
    *const u32,
    *const u32,
    *mut c_char,
    usize,
) -> i32;
/// `placelab_emu_poison`: marks bytes untouchable (non-zero) or usable for AddressSanitizer.
type PoisonFn = unsafe extern "C" fn(*const c_void, usize, i32);
/// `placelab_emu_checks_bounds`: non-zero when compiled under AddressSanitizer.
type ChecksBoundsFn = unsafe extern "C" fn() -> i32;

/// The four functions of `kernels/host/emulator.cpp` and the generated tables.
pub(crate) struct Library {
    pub table: TableFn,
    pub run_block: RunBlockFn,
    pub poison: PoisonFn,
    pub checks_bounds: ChecksBoundsFn,
}

unsafe extern "C" {
    fn placelab_emu_table(i: usize, len: *mut usize) -> *const RawKernel;
    fn placelab_emu_run_block(
        invoke: Invoke,
        args: *mut *mut c_void,
        grid: *const u32,
        block: *const u32,
        block_idx: *const u32,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
    fn placelab_emu_poison(addr: *const c_void, size: usize, poison: i32);
    fn placelab_emu_checks_bounds() -> i32;
}

/// The library every launch uses, chosen once per process; the error says why the one
/// `PLACELAB_EMULATOR_KERNELS` names cannot be used.
pub(crate) fn library() -> Result<&'static Library, &'static str> {
    static CHOSEN: OnceLock<Result<Library, String>> = OnceLock::new();
    CHOSEN
        .get_or_init(|| match std::env::var_os(VAR) {
            None => Ok(linked()),
            Some(path) => load(Path::new(&path)),
        })
        .as_ref()
        .map_err(String::as_str)
}

fn linked() -> Library {
    Library {
        table: placelab_emu_table,
        run_block: placelab_emu_run_block,
        poison: placelab_emu_poison,
        checks_bounds: placelab_emu_checks_bounds,
    }
}

/// Opens a kernel library and finds its four functions. It stays loaded for the process's life.
fn load(path: &Path) -> Result<Library, String> {
    let fail = |why: String| {
        format!(
            "{VAR}={}: {why}. Build one with `.ci/kernel-library.py`, or unset {VAR} to run the \
             kernels built into placelab.",
            path.display()
        )
    };
    let c_path = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| fail("the path holds a NUL byte".into()))?;
    // SAFETY: a NUL-terminated path; the library's constructors are those of plain C++ code.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(fail(last_dl_error()));
    }
    let find = |name: &CStr| -> Result<*mut c_void, String> {
        // SAFETY: a handle dlopen returned and a NUL-terminated name.
        let symbol = unsafe { libc::dlsym(handle, name.as_ptr()) };
        if symbol.is_null() {
            Err(fail(format!(
                "it has no function {} (is it a placelab kernel library?)",
                name.to_string_lossy()
            )))
        } else {
            Ok(symbol)
        }
    };
    // SAFETY: each symbol is the function of the same name and signature in
    // kernels/host/emulator.cpp or the generated index (`build.rs`), as `linked` binds them.
    unsafe {
        Ok(Library {
            table: std::mem::transmute::<*mut c_void, TableFn>(find(c"placelab_emu_table")?),
            run_block: std::mem::transmute::<*mut c_void, RunBlockFn>(find(
                c"placelab_emu_run_block",
            )?),
            poison: std::mem::transmute::<*mut c_void, PoisonFn>(find(c"placelab_emu_poison")?),
            checks_bounds: std::mem::transmute::<*mut c_void, ChecksBoundsFn>(find(
                c"placelab_emu_checks_bounds",
            )?),
        })
    }
}

fn last_dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message valid until the next dl call.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        "it cannot be loaded".into()
    } else {
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_that_is_not_there_is_named_with_the_fix() {
        let Err(why) = load(Path::new("/nonexistent/mutant.so")) else {
            panic!("a missing library loaded");
        };
        assert!(
            why.contains("PLACELAB_EMULATOR_KERNELS=/nonexistent/mutant.so"),
            "{why}"
        );
        assert!(why.contains("unset PLACELAB_EMULATOR_KERNELS"), "{why}");
    }

    #[test]
    fn a_library_without_the_kernels_is_refused_by_name() {
        // libc is loaded in every process, and has no kernel table.
        let Err(why) = load(Path::new("libc.so.6")) else {
            panic!("libc passed for a kernel library");
        };
        assert!(why.contains("no function placelab_emu_table"), "{why}");
    }
}
