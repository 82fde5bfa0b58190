//! The kernels of `kernels/*.cu` compiled for the host (`build.rs`), and how the emulator runs a
//! launch: the kernel is looked up by name, the arguments are checked against the parameters the
//! C++ compiler saw, the geometry against CUDA's limits, and then the grid's blocks run in
//! parallel on rayon's threads, each block's threads as fibers (`kernels/host/emulator.cpp`).

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::sync::OnceLock;

use rayon::prelude::*;

use crate::backend::gpu::args::{Arg, Param};
use crate::backend::gpu::call::Grid;

use super::library::{Invoke, library};

/// One kernel compiled for the host.
pub(crate) struct HostKernel {
    invoke: Invoke,
    pub(crate) params: Vec<Param>,
}

// SAFETY: a function pointer into the program's code.
unsafe impl Send for HostKernel {}
unsafe impl Sync for HostKernel {}

/// Every kernel compiled for the host, by name (the library's error if it cannot be loaded).
pub(crate) fn kernels() -> Result<&'static HashMap<String, HostKernel>, &'static str> {
    static K: OnceLock<HashMap<String, HostKernel>> = OnceLock::new();
    let library = library()?;
    Ok(K.get_or_init(|| {
        let mut map = HashMap::new();
        for table in 0.. {
            let mut len = 0;
            // SAFETY: the generated tables are static arrays of `len` entries.
            let entries = unsafe { (library.table)(table, &mut len) };
            if entries.is_null() {
                break;
            }
            for i in 0..len {
                let k = unsafe { &*entries.add(i) };
                let name = unsafe { CStr::from_ptr(k.name) }
                    .to_string_lossy()
                    .into_owned();
                let raw = unsafe { std::slice::from_raw_parts(k.params, k.nparams as usize) };
                let params = raw
                    .iter()
                    .map(|p| match p.kind {
                        0 => Param::U64,
                        1 => Param::U32,
                        2 => Param::F32,
                        _ => Param::Struct {
                            align: p.align as usize,
                            bytes: p.size as usize,
                        },
                    })
                    .collect();
                map.insert(
                    name,
                    HostKernel {
                        invoke: k.invoke,
                        params,
                    },
                );
            }
        }
        map
    }))
}

/// Whether the kernels were compiled under AddressSanitizer (a library built with
/// `.ci/kernel-library.py --asan`).
pub fn checks_bounds() -> bool {
    library().is_ok_and(|l| unsafe { (l.checks_bounds)() } != 0)
}

/// Tells AddressSanitizer that `[addr, addr + size)` may (`usable`) or may not be touched by a
/// kernel. Without ASan it does nothing.
pub(crate) fn mark_usable(addr: usize, size: usize, usable: bool) {
    if let (true, Ok(library)) = (size > 0, library()) {
        unsafe { (library.poison)(addr as *const c_void, size, (!usable) as i32) };
    }
}

/// Checks a launch as the driver and the compiler would have: the kernel exists, the arguments
/// fill its parameters, the geometry is within CUDA's limits.
pub(crate) fn check_launch(
    name: &str,
    grid: Grid,
    args: &[Arg],
) -> Result<&'static HostKernel, String> {
    let k = kernels()?
        .get(name)
        .ok_or_else(|| format!("no kernel named {name} in kernels/*.cu"))?;
    let given: Vec<Param> = args.iter().map(Arg::param).collect();
    if given != k.params {
        return Err(format!(
            "kernel {name} takes parameters {:?} but the launch passed {given:?}",
            k.params
        ));
    }
    let (bx, by, bz) = grid.threads;
    let (gx, gy, gz) = grid.blocks;
    let threads = bx as u64 * by as u64 * bz as u64;
    if threads == 0 || threads > 1024 || bx > 1024 || by > 1024 || bz > 64 {
        return Err(format!(
            "kernel {name}: a block of {bx}×{by}×{bz} threads is outside CUDA's limits (1 to 1024 threads, z ≤ 64)"
        ));
    }
    if gx == 0 || gy == 0 || gz == 0 || gx > i32::MAX as u32 || gy > 65535 || gz > 65535 {
        return Err(format!(
            "kernel {name}: a grid of {gx}×{gy}×{gz} blocks is outside CUDA's limits"
        ));
    }
    if grid.shared_bytes > 0 {
        return Err(format!(
            "kernel {name}: dynamic shared memory is not emulated (the kernels use none)"
        ));
    }
    Ok(k)
}

/// A raw pointer to the launch's argument values, shared by the blocks (they only read it).
struct Args(Vec<*mut c_void>);
// SAFETY: the pointers address `Arg` values that outlive the launch and are only read.
unsafe impl Send for Args {}
unsafe impl Sync for Args {}

/// Runs a checked launch to completion: every block, in parallel.
///
/// # Safety
/// The pointer arguments address memory holding what the kernel reads and writes there.
pub(crate) unsafe fn run(
    name: &str,
    k: &HostKernel,
    grid: Grid,
    mut args: Vec<Arg>,
) -> Result<(), String> {
    let run_block = library()?.run_block;
    let ptrs = Args(
        args.iter_mut()
            .map(|a| match a {
                Arg::U64(v) => v as *mut u64 as *mut c_void,
                Arg::I32(v) => v as *mut i32 as *mut c_void,
                Arg::F32(v) => v as *mut f32 as *mut c_void,
                Arg::Strided(v) => v as *mut _ as *mut c_void,
                Arg::List(v) => &mut **v as *mut _ as *mut c_void,
            })
            .collect(),
    );
    let (gx, gy, gz) = grid.blocks;
    let g = [gx, gy, gz];
    let b = [grid.threads.0, grid.threads.1, grid.threads.2];
    let count = gx as u64 * gy as u64 * gz as u64;
    let ptrs = &ptrs;
    let result = (0..count).into_par_iter().try_for_each(|i| {
        let idx = [
            (i % gx as u64) as u32,
            ((i / gx as u64) % gy as u64) as u32,
            (i / (gx as u64 * gy as u64)) as u32,
        ];
        let mut err = [0 as c_char; 512];
        // The kernel only reads the argument array (each parameter is copied in by value).
        let argv = ptrs.0.as_ptr() as *mut *mut c_void;
        let rc = unsafe {
            run_block(
                k.invoke,
                argv,
                g.as_ptr(),
                b.as_ptr(),
                idx.as_ptr(),
                err.as_mut_ptr(),
                err.len(),
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            let msg = unsafe { CStr::from_ptr(err.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            Err(format!(
                "kernel {name}, block ({}, {}, {}): {msg}",
                idx[0], idx[1], idx[2]
            ))
        }
    });
    drop(args);
    result
}
