//! The stand-in GPUs of the engine's tests. Each test binary that uses this runs its tests on
//! *simulated* devices (the CPU kernels), and then, from `every_test_again_on_emulated_devices`,
//! runs itself again with `PLACELAB_TEST_EMULATED=1`: every test once more on *emulated* devices,
//! where the CUDA backend and the real `kernels/*.cu` (compiled for the host) do the work. So
//! one test body checks both, and the CUDA code runs in every `cargo test` without a GPU.

#![allow(dead_code)] // each test binary uses part of it

use std::process::Command;

use placelab::cuda;

const VAR: &str = "PLACELAB_TEST_EMULATED";

/// The stand-in devices a test process runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StandIn {
    Simulated,
    Emulated,
}

/// Which stand-in this process's tests use.
pub fn kind() -> StandIn {
    if std::env::var_os(VAR).is_some_and(|v| v == "1") {
        StandIn::Emulated
    } else {
        StandIn::Simulated
    }
}

/// Turns on `count` stand-in CUDA devices of this process's kind (`cuda::simulate`, or
/// `cuda::emulate` in the emulated run).
pub fn gpus(count: usize, capacity: Option<usize>) -> placelab::Result<()> {
    match kind() {
        StandIn::Simulated => cuda::simulate(count, capacity),
        StandIn::Emulated => cuda::emulate(count, capacity),
    }
}

/// `simulated` or `emulated`: how cards and transfers label this process's devices.
pub fn label() -> &'static str {
    match kind() {
        StandIn::Simulated => "simulated",
        StandIn::Emulated => "emulated",
    }
}

/// Runs every other test of this binary again on emulated devices, in a child process, and
/// fails with the child's output if any of them fails. `me` is the calling test's name.
pub fn rerun_emulated(me: &str) {
    if kind() == StandIn::Emulated {
        return; // the child itself
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .env(VAR, "1")
        .args(["--skip", me])
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stdout
        .lines()
        .rfind(|l| l.starts_with("test result:"))
        .unwrap_or("no test result line");
    assert!(
        out.status.success(),
        "on emulated devices: {summary}\n{stdout}\n{stderr}"
    );
    // What ran: the parent's output shows it under this test's name with --nocapture.
    println!("on emulated devices: {summary}");
}

/// How a copy to or from this process's stand-in devices is timed.
pub fn clock() -> placelab::transfer::Clock {
    match kind() {
        StandIn::Simulated => placelab::transfer::Clock::SimulatedHostCopy,
        StandIn::Emulated => placelab::transfer::Clock::EmulatedEvents,
    }
}
