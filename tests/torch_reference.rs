//! The PyTorch reference cases on the CPU and on a simulated CUDA device.

#[path = "support/stand_in.rs"]
mod stand_in;

#[path = "support/torch_cases.rs"]
mod torch_cases;

use placelab::prelude::*;
use torch_cases::replay;

#[test]
fn every_case_matches_pytorch_on_cpu() {
    assert!(replay(&Device::Cpu) >= 284);
}

#[test]
fn every_case_matches_pytorch_on_a_simulated_gpu() {
    stand_in::gpus(2, None).unwrap();
    replay(&Device::Cuda(1));
}

/// Two half-precision rules of PyTorch's that only show on rare values: f64 → f16/bf16 rounds
/// through f32 (`c10::Half` and `c10::BFloat16` are built from a float), and a Rust number next
/// to an f16/bf16 tensor stays f32 (PyTorch's "opmath" type) instead of being rounded first.
/// Host devices compute half precision in f32 throughout, so the second rule holds there by
/// construction; on a real GPU, where the kernels take f16/bf16, `tests/cuda_gpu.rs` checks it
/// against the CPU.
#[test]
fn half_precision_rounds_as_pytorch_does_on_every_device() {
    // The same setting as the test beside it, which runs on another thread of this process.
    stand_in::gpus(2, None).unwrap();
    for device in [Device::Cpu, Device::Cuda(0)] {
        // Just above the midpoint between 1 and the next f16 (bf16): rounded once it is the
        // upper neighbour, rounded through f32 it becomes the midpoint, and ties go to even (1).
        for (dtype, mantissa_bits) in [(DType::F16, 10), (DType::BF16, 7)] {
            let v = 1.0 + 2f64.powi(-mantissa_bits - 1) + 2f64.powi(-40);
            let x = Tensor::from_vec(vec![v], [1], device).unwrap();
            let h = x.to_dtype(dtype).unwrap();
            assert_eq!(h.to_f64_vec().unwrap(), [1.0], "{dtype} on {device}");
        }
        // 0.0004884 rounded to f16 is 2⁻¹¹ and 1 + 2⁻¹¹ ties down to 1; in f32 it rounds up.
        let ones = Tensor::ones([2], (DType::F16, device)).unwrap();
        let sum = ones.add(0.000_488_4).unwrap();
        assert_eq!(sum.dtype(), DType::F16);
        assert_eq!(
            sum.to_f64_vec().unwrap(),
            [1.0 + 2f64.powi(-10); 2],
            "{device}"
        );
    }
}

/// The tests above, again on emulated devices: the CUDA backend and `kernels/*.cu` do the work.
#[test]
fn every_test_again_on_emulated_devices() {
    stand_in::rerun_emulated("every_test_again_on_emulated_devices");
}
