//! The `placelab` command. Until the REPL lands it reports the devices it sees and how to use
//! the engine; it never pretends to evaluate input.

use placelab::{Device, cuda, display::human_bytes, memory};

fn main() {
    println!("{}", banner());
    println!();
    println!(
        "The interactive REPL and Jupyter kernel are not built yet. Meanwhile, use the engine"
    );
    println!(
        "from Rust: add `placelab = {{ path = \"{}\" }}` to a project and",
        env!("CARGO_MANIFEST_DIR")
    );
    println!("`use placelab::prelude::*;` (see README.md), or run the tests with `.ci/run`.");
    println!();
    println!(
        "Environment: PLACELAB_SIMULATE_CUDA=N[,CAPACITY] gives N simulated CUDA devices (e.g. 2,8GiB)."
    );
}

/// `placelab 0.1 · devices: cpu (2 threads), cuda:0 NVIDIA H100 80GB HBM3 (79.1 GiB free)`.
fn banner() -> String {
    let mut parts = vec![format!("cpu ({} threads)", rayon::current_num_threads())];
    for i in 0..cuda::device_count() {
        let name = cuda::device_name(i).unwrap_or_else(|e| e.to_string());
        let free = memory::mem_get_info(&Device::Cuda(i))
            .map(|(f, _)| format!(" ({} free)", human_bytes(f)))
            .unwrap_or_default();
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
