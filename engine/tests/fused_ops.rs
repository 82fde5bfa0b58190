//! `addmm`, the bias and the product of a `Linear` in one GEMM (on a GPU the bias row in
//! cuBLASLt's epilogue, as PyTorch's `addmm`; a bias matrix copied into the output, the product
//! added onto it with β = 1), gives what `matmul` then `add` gave, on the CPU and on emulated
//! devices (the real backend code, with launches counted), in every float dtype, forward and
//! backward; and refuses what it cannot take with an error that says what to pass instead.

use std::sync::Mutex;

use placelab::gpu::emulated;
use placelab::nn::{Linear, Module};
use placelab::prelude::*;

#[path = "support/launches.rs"]
mod launches;
use launches::launches_in;

const GPU: Device = Device::Cuda(0);

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// `x`, `w` and `b` of a 64-row batch through a 300 → 10 layer, in `dtype` on `device`, each
/// taking a gradient.
fn layer(dtype: DType, device: Device) -> [Tensor; 3] {
    manual_seed(1);
    [vec![64, 300], vec![10, 300], vec![10]].map(|shape| {
        Tensor::randn(shape, Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
            .to(&device)
            .unwrap()
            .requires_grad_(true)
            .unwrap()
    })
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

#[test]
fn addmm_gives_matmul_then_add_forward_and_backward() {
    let _serial = serial();
    cuda::emulate(1, None).unwrap();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        // The composed ops round the product, then the sum; addmm adds onto the bias inside the
        // GEMM (in f32 for halves, rounded once). Within a few units of the last place.
        let ulp = match dtype {
            DType::F64 => 1e-13,
            DType::F32 => 1e-5,
            _ => 2f64.powi(-6),
        };
        for device in [Device::Cpu, GPU] {
            let [x, w, b] = layer(dtype, device);
            let fused = b.addmm(&x, &w.t().unwrap()).unwrap();
            let composed = x.matmul(&w.t().unwrap()).unwrap().add(&b).unwrap();
            assert_eq!(fused.shape(), &[64, 10]);
            assert_eq!((fused.dtype(), fused.device()), (dtype, device));
            let close = |got: &[f64], want: &[f64], what: &str| {
                for (g, w) in got.iter().zip(want) {
                    assert!(
                        (g - w).abs() <= ulp * w.abs().max(1.0) * 4.0,
                        "{what} {dtype} on {device}: {g} vs {w}"
                    );
                }
            };
            close(&values(&fused), &values(&composed), "forward");
            let mut grads = Vec::new();
            for y in [&fused, &composed] {
                for t in [&x, &w, &b] {
                    t.set_grad(None);
                }
                y.sum_all().unwrap().backward().unwrap();
                grads.push([&x, &w, &b].map(|t| values(&t.grad().expect("a gradient"))));
            }
            for (i, name) in ["x", "weight", "bias"].iter().enumerate() {
                close(&grads[0][i], &grads[1][i], &format!("{name}'s gradient"));
            }
        }
    }
}

/// The launches the code `f` queues on the emulated `cuda:0`, by name.
fn launches_of(f: impl FnOnce()) -> Vec<(String, u64)> {
    launches_in(f).into_iter().collect()
}

/// A `Linear` forward on a GPU is what PyTorch's is: one GEMM with the bias in its epilogue; no
/// copy, no add kernel, and no output but the one it returns. A bias that is a whole matrix is
/// copied into the output first, and the GEMM adds the product onto it.
#[test]
fn a_linear_forward_is_one_gemm_with_its_bias() {
    let _serial = serial();
    cuda::emulate(1, None).unwrap();
    let layer = Linear::new(300, 10, GPU).unwrap();
    let x = Tensor::randn([64, 300], GPU).unwrap();
    let _warm = layer.forward(&x).unwrap(); // cuBLAS's workspace, made at the first GEMM
    cuda::synchronize(0).unwrap();
    let start = cuda::memory_allocated(0).unwrap();
    cuda::reset_peak_memory_stats(0).unwrap();
    let mut y = None;
    let launched = launches_of(|| y = Some(layer.forward(&x).unwrap()));
    let y = y.unwrap();
    assert_eq!(launched, [("gemm".to_string(), 1)]);
    // 64 × 10 f32 is 2,560 bytes, one 2,560-byte block (a multiple of 512): nothing else.
    assert_eq!(cuda::max_memory_allocated(0).unwrap() - start, 2560);
    let bias_matrix = Tensor::randn([64, 10], GPU).unwrap();
    let w = Tensor::randn([300, 10], GPU).unwrap();
    let launched = launches_of(|| drop(bias_matrix.addmm(&x, &w).unwrap()));
    let want = [("copy_b4", 1), ("gemm", 1)].map(|(k, n)| (k.to_string(), n));
    assert_eq!(launched, want);
    // Leading dims fold into rows: a [2, 32, 300] batch gives [2, 32, 10], the same values.
    let folded = layer.forward(&x.reshape([2, 32, 300]).unwrap()).unwrap();
    assert_eq!(folded.shape(), &[2, 32, 10]);
    assert_eq!(values(&folded), values(&y));
}

#[test]
fn addmm_refuses_what_it_cannot_take() {
    let _serial = serial();
    let m = |shape: &[usize]| Tensor::zeros(shape.to_vec(), Device::Cpu).unwrap();
    let cases: [(Tensor, Tensor, Tensor, &str); 4] = [
        (
            m(&[4]),
            m(&[3, 5]),
            m(&[4, 4]),
            "the inner sizes must match",
        ),
        (
            m(&[5]),
            m(&[3, 4]),
            m(&[4, 2]),
            "must broadcast to the product's shape [3, 2]",
        ),
        (
            m(&[2]),
            m(&[2, 3, 4]),
            m(&[4, 2]),
            "for vectors or batches use",
        ),
        (
            m(&[2]),
            m(&[3, 4]),
            Tensor::zeros([4, 2], (DType::F64, Device::Cpu)).unwrap(),
            "needs all its operands of one dtype",
        ),
    ];
    for (bias, a, b, want) in cases {
        let e = bias.addmm(&a, &b).unwrap_err().to_string();
        assert!(e.contains("addmm") && e.contains(want), "{e}");
    }
}

/// `nll_loss`'s backward on a GPU, one kernel (the rows and `−g / total_weight` together, as
/// PyTorch's `nll_loss_backward`), gives bit for bit what the unfused ops gave (the rows of −1
/// times `g / total_weight`), in f32 and f64, for a loss scaled after it (`g` not 1), on a view
/// of the targets; and it is one launch.
#[test]
fn the_nll_backward_in_one_kernel_gives_the_unfused_gradient() {
    use placelab::nn::NLLLoss;
    let _serial = serial();
    cuda::emulate(1, None).unwrap();
    for dtype in [DType::F32, DType::F64] {
        let (n, c) = (7usize, 5usize);
        let x = Tensor::randn([n, c], Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
            .to(&GPU)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        // Every other entry of 14 classes: a strided view.
        let classes: Vec<i64> = (0..2 * n as i64).map(|i| (i * 3) % c as i64).collect();
        let all = Tensor::from_vec(classes.clone(), [2 * n], GPU).unwrap();
        let target = all
            .reshape([n, 2])
            .unwrap()
            .narrow(1, 0, 1)
            .unwrap()
            .reshape([n])
            .unwrap();
        let loss = NLLLoss.forward(&x, &target).unwrap().mul(3.0).unwrap();
        cuda::synchronize(0).unwrap();
        let before = emulated::launches("class_rows_f32") + emulated::launches("class_rows_f64");
        loss.backward().unwrap();
        cuda::synchronize(0).unwrap();
        let after = emulated::launches("class_rows_f32") + emulated::launches("class_rows_f64");
        assert_eq!(
            after - before,
            1,
            "{dtype}: the backward's launches of class_rows"
        );
        let grad = values(&x.grad().unwrap());
        // The unfused ops: the picks' −1 times (3 / n), in the dtype.
        let (pick32, pick64) = (-1.0f32, -1.0f64);
        let at_class = match dtype {
            DType::F32 => f64::from(pick32 * (3.0f32 / n as f32)),
            _ => pick64 * (3.0 / n as f64),
        };
        for (i, row) in grad.chunks(c).enumerate() {
            for (k, &v) in row.iter().enumerate() {
                let want = if k as i64 == classes[2 * i] {
                    at_class
                } else {
                    0.0
                };
                assert_eq!(v.to_bits(), want.to_bits(), "{dtype}: row {i}, class {k}");
            }
        }
    }
}
