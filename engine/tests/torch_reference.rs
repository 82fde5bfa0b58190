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
/// construction; on a real GPU, where the kernels take f16/bf16, `engine/tests/cuda_gpu.rs` checks it
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

/// A model of the saved-tensors fixture, built with placelab: its layers, one batch and targets.
struct SavedCase {
    name: String,
    model: nn::Sequential,
    x: Tensor,
    y: Tensor,
    mse: bool,
    autocast: Option<DType>,
}

fn saved_cases(device: &Device) -> Vec<(SavedCase, serde_json::Value)> {
    let text = include_str!("fixtures/torch_saved_tensors.json");
    let fixture: serde_json::Value = serde_json::from_str(text).unwrap();
    let mut cases = Vec::new();
    for case in fixture["cases"].as_array().unwrap() {
        let sizes = torch_cases::sizes(&case["layers"]);
        let batch = case["batch"].as_u64().unwrap() as usize;
        let mut model = nn::Sequential::new();
        for (i, w) in sizes.windows(2).enumerate() {
            model = model.add(nn::Linear::new(w[0], w[1], device).unwrap());
            if i + 2 < sizes.len() {
                model = model.add(nn::ReLU);
            }
        }
        let classes = *sizes.last().unwrap();
        let mse = case["loss"] == "mse";
        let y = if mse {
            Tensor::randn([batch, classes], device).unwrap()
        } else {
            Tensor::randint(0, classes as i64, [batch], device).unwrap()
        };
        let autocast = match case["autocast"].as_str() {
            Some("f16") => Some(DType::F16),
            Some("bf16") => Some(DType::BF16),
            _ => None,
        };
        cases.push((
            SavedCase {
                name: case["name"].as_str().unwrap().to_string(),
                x: Tensor::randn([batch, sizes[0]], device).unwrap(),
                y,
                model,
                mse,
                autocast,
            },
            case.clone(),
        ));
    }
    cases
}

/// What `loss.saved_tensors()` lists, as the fixture writes it: (shape, dtype, bytes, kind),
/// where kind says whether the storage is a parameter's, the batch's or the targets', or made
/// by the forward pass.
fn saved_by_placelab(case: &SavedCase) -> Vec<(Vec<usize>, String, usize, &'static str)> {
    let forward = || -> placelab::Result<Tensor> {
        let out = case.model.forward(&case.x)?;
        if case.mse {
            nn::MSELoss::new().forward(&out, &case.y)
        } else {
            nn::CrossEntropyLoss::new().forward(&out, &case.y)
        }
    };
    let loss = match case.autocast {
        Some(low) => autocast(low, forward).unwrap(),
        None => forward(),
    }
    .unwrap();
    let params = case.model.parameters();
    let mut found: Vec<_> = loss
        .saved_tensors()
        .iter()
        .map(|t| {
            let kind = if params.iter().any(|p| p.shares_storage_with(t)) {
                "param"
            } else if t.shares_storage_with(&case.x) || t.shares_storage_with(&case.y) {
                "input"
            } else {
                "made"
            };
            (
                t.shape().to_vec(),
                t.dtype().name().to_string(),
                t.nbytes(),
                kind,
            )
        })
        .collect();
    found.sort();
    found
}

/// Autograd keeps what PyTorch's keeps, tensor for tensor: the fixture was recorded with
/// `torch.autograd.graph.saved_tensors_hooks` on the seeds' and the notebooks' models
/// (`gen_saved_tensors.py`). So the memory a forward pass holds until `backward()` is PyTorch's.
#[test]
fn autograd_saves_what_pytorch_saves_for_backward() {
    stand_in::gpus(2, None).unwrap();
    for device in [Device::Cpu, Device::Cuda(1)] {
        for (case, want) in saved_cases(&device) {
            // The 4096-wide models only on the CPU: the graph does not depend on the device.
            if device.is_cuda() && want["made_bytes"].as_u64().unwrap() > 1 << 20 {
                continue;
            }
            let mut expected: Vec<_> = want["saved"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    let shape = s["shape"].as_array().unwrap();
                    (
                        shape
                            .iter()
                            .map(|d| d.as_u64().unwrap() as usize)
                            .collect::<Vec<_>>(),
                        s["dtype"].as_str().unwrap().to_string(),
                        s["bytes"].as_u64().unwrap() as usize,
                        match s["kind"].as_str().unwrap() {
                            "param" => "param",
                            "input" => "input",
                            _ => "made",
                        },
                    )
                })
                .collect();
            expected.sort();
            let found = saved_by_placelab(&case);
            assert_eq!(found, expected, "{} on {device}", case.name);
            let made: usize = found.iter().filter(|s| s.3 == "made").map(|s| s.2).sum();
            assert_eq!(
                made as u64,
                want["made_bytes"].as_u64().unwrap(),
                "{}",
                case.name
            );
        }
    }
}

/// The tests above, again on emulated devices: the CUDA backend and `kernels/*.cu` do the work.
#[test]
fn every_test_again_on_emulated_devices() {
    stand_in::rerun_emulated("every_test_again_on_emulated_devices");
}
