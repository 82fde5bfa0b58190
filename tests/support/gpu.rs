//! For the tests that need a real NVIDIA GPU. They are `#[ignore]`d, so a plain `cargo test`
//! (CI, most machines: no GPU) lists them as ignored; `benches/gpu-check.sh` runs them with
//! `--include-ignored` on a GPU machine, where a missing GPU is a failure. The simulated-device
//! tests cover the same engine paths everywhere.

use placelab::prelude::*;

/// Fails the test, saying why, unless `cuda:0` is a real GPU.
pub fn require_gpu() {
    assert!(
        cuda::is_available() && !Device::Cuda(0).is_simulated(),
        "this test needs a real CUDA device: {:?}",
        cuda::unavailable_reason()
    );
}
