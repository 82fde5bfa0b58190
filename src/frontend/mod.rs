//! The front end: one evcxr `Session` with the engine preloaded, and the thin shells over it
//! (the terminal REPL and the script runner).

pub mod cell_check;
pub mod cell_output;
pub mod engine;
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
pub mod setup;
pub mod slots;
pub mod strip;

use crate::{Device, cuda, display::human_bytes, memory};

/// `placelab 0.1 · devices: cpu (2 threads), cuda:0 NVIDIA H100 80GB HBM3 (79.1 GiB free)`.
/// `with_free` asks the driver for free memory, which creates a CUDA context in this process:
/// the kernel leaves it out, so only the cell process ever holds GPU memory.
pub fn devices_banner(with_free: bool) -> String {
    let mut parts = vec![format!("cpu ({} threads)", crate::cpu_threads())];
    for i in 0..cuda::device_count() {
        let name = cuda::device_name(i).unwrap_or_else(|e| e.to_string());
        // A stand-in device's name already gives its capacity.
        let free = match Device::Cuda(i).stand_in().is_some() || !with_free {
            true => String::new(),
            false => memory::mem_get_info(&Device::Cuda(i))
                .map(|(f, _)| format!(" ({} free)", human_bytes(f)))
                .unwrap_or_default(),
        };
        parts.push(format!("{} {name}{free}", Device::Cuda(i).label()));
    }
    if let Some(why) = cuda::unavailable_reason() {
        parts.push(format!("no CUDA: {why}"));
    }
    format!(
        "placelab {} · devices: {}",
        env!("CARGO_PKG_VERSION"),
        parts.join(", ")
    )
}
