//! The front end: one evcxr `Session` with the engine preloaded, and the thin shells over it
//! (the terminal REPL and the script runner).

mod build_lock;
pub mod cell;
pub mod cell_check;
mod cell_end;
pub mod cell_output;
pub mod compile_error;
pub mod cuda_choice;
pub mod cuda_libs;
pub mod cuda_probe;
pub mod engine;
mod engine_check;
pub mod evaluator;
pub mod history;
pub mod interrupter;
pub mod kernel;
pub mod magics;
pub mod plot;
pub mod prebuild;
pub mod probe_client;
pub mod progress;
pub mod render;
pub mod repl;
pub mod report;
pub mod script;
pub mod session;
mod session_prepare;
pub mod settings;
pub mod setup;
pub mod slots;
pub mod strip;
pub mod type_names;

/// `placelab 0.1 · devices: cpu (2 threads), cuda:0 NVIDIA H100 80GB HBM3 (79.1 GiB free)`, for
/// the REPL and `placelab devices`, listed by the same function as the cell process's `:devices`
/// (before any cell could change it with `:simulate`). The kernel's banner leaves devices out:
/// its process never loads CUDA, only the cell process does.
pub fn devices_banner(with_free: bool) -> String {
    // Not the libraries' versions: NVRTC is the cell process's to load, of the major its engine
    // is built for (`cuda_libs`), and this process's engine is CUDA 13's.
    let list = placelab::cuda::devices_without_versions(with_free);
    let mut parts = list.devices;
    parts.extend(list.missing.map(|why| format!("no CUDA: {why}")));
    format!(
        "placelab {} · devices: {}",
        env!("CARGO_PKG_VERSION"),
        parts.join(", ")
    )
}
