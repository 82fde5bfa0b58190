//! On a real GPU: one process never mixes the real GPU with simulated devices. In its own test
//! binary because it leaves cuBLAS's workspace on the GPU, which would shift the allocator
//! numbers `cuda_gpu_memory` compares with PyTorch's. Ignored by a plain `cargo test`;
//! `benches/gpu-check.sh` runs it on a GPU machine.

#[path = "support/gpu.rs"]
mod gpu;

use placelab::prelude::*;

const GPU: Device = Device::Cuda(0);

/// Whether `cuda:0` is a simulated device now.
fn simulated() -> bool {
    matches!(GPU.kind(), Ok(DeviceKind::SimulatedGpu { .. }))
}

#[test]
#[ignore = "needs an NVIDIA GPU: benches/gpu-check.sh runs it"]
fn a_process_never_mixes_the_real_gpu_with_simulated_ones() {
    gpu::require_gpu();
    let x = Tensor::ones([4], GPU).unwrap();
    let e = cuda::simulate(1, None).unwrap_err().to_string();
    assert!(
        e.contains("1 tensor storage(s) live on the real GPU cuda:0"),
        "{e}"
    );
    assert!(!simulated(), "a refused switch changes nothing");
    drop(x);
    // Nothing of the real GPU's is live: cuda:0 becomes a simulated device, and back.
    cuda::simulate(1, Some(64 << 20)).unwrap();
    assert!(simulated());
    assert_eq!(cuda::mem_get_info(0).unwrap().1, 64 << 20);
    let s = Tensor::ones([4], GPU).unwrap();
    assert!(s.to_string().contains("(simulated)"), "{s}");
    drop(s);
    cuda::simulate(0, None).unwrap();
    assert!(!simulated());
    // A matmul leaves cuBLAS's workspace on the GPU (as in PyTorch): counted in
    // memory_allocated, listed as what it is, not as a tensor, and it keeps the GPU real.
    let before = cuda::memory_allocated(0).unwrap();
    let m = Tensor::ones([8, 8], GPU).unwrap();
    drop(m.matmul(&m).unwrap());
    drop(m);
    assert!(cuda::memory_allocated(0).unwrap() > before);
    let summary = cuda::memory_summary(0).unwrap();
    assert!(summary.contains("cuBLAS workspace"), "{summary}");
    let e = cuda::simulate(1, None).unwrap_err().to_string();
    assert!(
        e.contains("still holds the engine's cuBLAS workspace")
            && e.contains("PLACELAB_SIMULATE_CUDA"),
        "{e}"
    );
}
