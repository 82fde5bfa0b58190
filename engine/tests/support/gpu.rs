//! For the GPU tests. On a machine with an NVIDIA GPU they run on it (`benches/gpu-check.sh`
//! runs them there); everywhere else on two *emulated* devices: the CUDA backend and the real
//! `kernels/*.cu`, compiled for the host, so the same checks run in every `cargo test`. What
//! only hardware can show (the driver, cuBLAS, real timings) is checked on the real GPU alone.

#![allow(dead_code)] // each test binary uses part of it

use placelab::prelude::*;

/// Makes `cuda:0` ready (`require_gpu`) and holds a lock for the calling test: the tests of a
/// binary share the process's random generator, and a seeded test draws the same numbers only
/// if no other test draws between its `manual_seed` and its last draw.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_gpu();
    guard
}

/// Makes `cuda:0` a real GPU when this machine has one, else an emulated device (of two).
pub fn require_gpu() {
    if cuda::real_device_count() == 0 {
        cuda::emulate(2, None).expect("emulated devices");
    }
    assert!(
        cuda::is_available()
            && !matches!(Device::Cuda(0).kind(), Ok(DeviceKind::SimulatedGpu { .. })),
        "these tests need a real or emulated CUDA device: {:?}",
        cuda::unavailable_reason()
    );
}

/// Whether the tests run on a real GPU (else on emulated devices).
pub fn real() -> bool {
    matches!(Device::Cuda(0).kind(), Ok(DeviceKind::Gpu))
}

/// The clock a copy to or from `cuda:0` is timed by: CUDA events, or the emulator's host
/// timestamps on its stream.
pub fn clock() -> placelab::transfer::Clock {
    if real() {
        placelab::transfer::Clock::CudaEvents
    } else {
        placelab::transfer::Clock::EmulatedEvents
    }
}
