//! The PyTorch reference cases on the CPU and on a simulated CUDA device.

#[path = "support/torch_cases.rs"]
mod torch_cases;

use placelab::prelude::*;
use torch_cases::replay;

#[test]
fn every_case_matches_pytorch_on_cpu() {
    assert!(replay(&Device::Cpu) >= 200);
}

#[test]
fn every_case_matches_pytorch_on_a_simulated_gpu() {
    cuda::simulate(2, None).unwrap();
    replay(&Device::Cuda(1));
}
