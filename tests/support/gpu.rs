//! Gate for tests that need a real NVIDIA GPU. `benches/gpu-check.sh` runs them with
//! `PLACELAB_GPU_TESTS=1`, where a missing GPU is a failure; elsewhere they say why they did not
//! run and pass, since CI and most machines have no GPU (the simulated-device tests cover the
//! same engine paths there).

use placelab::prelude::*;

pub fn gpu_required() -> bool {
    let asked = std::env::var_os("PLACELAB_GPU_TESTS").is_some();
    if !asked {
        eprintln!(
            "PLACELAB_GPU_TESTS is not set: this GPU test does not run here (benches/gpu-check.sh runs it on a GPU machine)"
        );
        return false;
    }
    assert!(
        cuda::is_available() && !Device::Cuda(0).is_simulated(),
        "PLACELAB_GPU_TESTS is set but there is no real CUDA device: {:?}",
        cuda::unavailable_reason()
    );
    true
}
