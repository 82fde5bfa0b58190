//! Gradients of every differentiable op against central finite differences (in f64), and the
//! autograd rules users rely on: no_grad, accumulation, detach, freed graphs, clear errors.

#[path = "support/stand_in.rs"]
mod stand_in;

use placelab::prelude::*;

type Op = Box<dyn Fn(&[Tensor]) -> Result<Tensor>>;

fn t(shape: &[usize], seed: u64) -> Tensor {
    manual_seed(seed);
    Tensor::randn(shape.to_vec(), (DType::F64, Device::Cpu)).unwrap()
}

fn positive(shape: &[usize], seed: u64) -> Tensor {
    (&t(shape, seed).abs().unwrap() + 0.5).unwrap()
}

/// Checks d(sum(f(x)·w))/dx against finite differences for every input.
fn check(name: &str, inputs: Vec<Tensor>, f: &Op) -> Vec<String> {
    let leaves: Vec<Tensor> = inputs
        .iter()
        .map(|x| x.detach().requires_grad_(true).unwrap())
        .collect();
    let out = f(&leaves).unwrap();
    manual_seed(99);
    let w = Tensor::randn(out.shape().to_vec(), (DType::F64, out.device())).unwrap();
    let loss = |xs: &[Tensor]| {
        f(xs)
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap()
            .mul(&w)
            .unwrap()
            .sum_all()
            .unwrap()
    };
    loss(&leaves).backward().unwrap();
    let mut wrong = Vec::new();
    for (k, x) in inputs.iter().enumerate() {
        let analytic = leaves[k]
            .grad()
            .map(|g| g.to_f64_vec().unwrap())
            .unwrap_or_default();
        let vals = x.to_f64_vec().unwrap();
        let eps = 1e-6;
        for (j, &a) in analytic.iter().enumerate() {
            let at = |d: f64| {
                let mut v = vals.clone();
                v[j] += d;
                let mut xs = inputs.clone();
                xs[k] = Tensor::from_vec(v, x.shape().to_vec(), x.device())
                    .unwrap()
                    .to_dtype(x.dtype())
                    .unwrap();
                no_grad(|| loss(&xs)).item::<f64>().unwrap()
            };
            let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
            if (a - numeric).abs() > 1e-6 + 1e-4 * numeric.abs() {
                wrong.push(format!(
                    "{name}: input {k} element {j}: autograd {a}, finite difference {numeric}"
                ));
                break;
            }
        }
        if analytic.len() != vals.len() {
            wrong.push(format!(
                "{name}: input {k} got {} gradient values for {} elements",
                analytic.len(),
                vals.len()
            ));
        }
    }
    wrong
}

#[test]
fn every_differentiable_op_matches_finite_differences() {
    stand_in::gpus(3, None).unwrap();
    let cases: Vec<(&str, Vec<Tensor>, Op)> = vec![
        (
            "add broadcast",
            vec![t(&[2, 3], 1), t(&[3], 2)],
            Box::new(|x| &x[0] + &x[1]),
        ),
        (
            "sub",
            vec![t(&[4, 1], 3), t(&[1, 5], 4)],
            Box::new(|x| &x[0] - &x[1]),
        ),
        (
            "mul",
            vec![t(&[2, 3], 5), t(&[2, 3], 6)],
            Box::new(|x| &x[0] * &x[1]),
        ),
        (
            "div",
            vec![t(&[2, 3], 7), positive(&[3], 8)],
            Box::new(|x| &x[0] / &x[1]),
        ),
        (
            "pow",
            vec![positive(&[2, 3], 9), t(&[2, 3], 10)],
            Box::new(|x| x[0].pow(&x[1])),
        ),
        ("pow scalar", vec![t(&[5], 11)], Box::new(|x| x[0].pow(3))),
        ("rsub scalar", vec![t(&[5], 12)], Box::new(|x| 2.0 - &x[0])),
        (
            "maximum",
            vec![t(&[6], 13), t(&[6], 14)],
            Box::new(|x| x[0].maximum(&x[1])),
        ),
        (
            "minimum",
            vec![t(&[6], 15), t(&[1], 16)],
            Box::new(|x| x[0].minimum(&x[1])),
        ),
        ("neg", vec![t(&[4], 17)], Box::new(|x| x[0].neg())),
        ("exp", vec![t(&[4], 18)], Box::new(|x| x[0].exp())),
        ("log", vec![positive(&[4], 19)], Box::new(|x| x[0].log())),
        ("sqrt", vec![positive(&[4], 20)], Box::new(|x| x[0].sqrt())),
        ("abs", vec![t(&[6], 21)], Box::new(|x| x[0].abs())),
        ("relu", vec![t(&[6], 22)], Box::new(|x| x[0].relu())),
        ("sigmoid", vec![t(&[6], 23)], Box::new(|x| x[0].sigmoid())),
        ("tanh", vec![t(&[6], 24)], Box::new(|x| x[0].tanh())),
        ("gelu", vec![t(&[6], 25)], Box::new(|x| x[0].gelu())),
        (
            "clamp",
            vec![t(&[8], 26)],
            Box::new(|x| x[0].clamp(Some(-0.5), Some(0.7))),
        ),
        (
            "where",
            vec![t(&[2, 3], 27), t(&[3], 28)],
            Box::new(|x| Tensor::where_cond(&x[0].gt(0.0)?, &x[0], &x[1])),
        ),
        (
            "sum dims",
            vec![t(&[2, 3, 4], 29)],
            Box::new(|x| x[0].sum([0, 2], false)),
        ),
        (
            "sum all",
            vec![t(&[2, 3], 30)],
            Box::new(|x| x[0].sum_all()),
        ),
        (
            "mean keepdim",
            vec![t(&[2, 3, 4], 31)],
            Box::new(|x| x[0].mean(-1, true)),
        ),
        (
            "max dim",
            vec![t(&[3, 5], 32)],
            Box::new(|x| x[0].max(1, false)),
        ),
        (
            "min all",
            vec![t(&[3, 5], 33)],
            Box::new(|x| x[0].min_all()),
        ),
        (
            "max_dim values",
            vec![t(&[3, 5], 34)],
            Box::new(|x| Ok(x[0].max_dim(0, true)?.0)),
        ),
        (
            "softmax",
            vec![t(&[3, 5], 35)],
            Box::new(|x| x[0].softmax(1)),
        ),
        (
            "softmax dim0",
            vec![t(&[3, 5], 36)],
            Box::new(|x| x[0].softmax(0)),
        ),
        (
            "log_softmax",
            vec![t(&[3, 5], 37)],
            Box::new(|x| x[0].log_softmax(-1)),
        ),
        (
            "matmul",
            vec![t(&[3, 4], 38), t(&[4, 2], 39)],
            Box::new(|x| x[0].matmul(&x[1])),
        ),
        (
            "matmul batched broadcast",
            vec![t(&[2, 1, 3, 4], 40), t(&[3, 4, 2], 41)],
            Box::new(|x| x[0].matmul(&x[1])),
        ),
        (
            "matmul vector-matrix",
            vec![t(&[4], 42), t(&[4, 3], 43)],
            Box::new(|x| x[0].matmul(&x[1])),
        ),
        (
            "matmul matrix-vector",
            vec![t(&[3, 4], 44), t(&[4], 45)],
            Box::new(|x| x[0].matmul(&x[1])),
        ),
        (
            "matmul dot",
            vec![t(&[4], 46), t(&[4], 47)],
            Box::new(|x| x[0].matmul(&x[1])),
        ),
        (
            "addmm with a bias row",
            vec![t(&[2], 70), t(&[3, 4], 71), t(&[2, 4], 72)],
            Box::new(|x| x[0].addmm(&x[1], &x[2].t()?)),
        ),
        (
            "addmm with a full matrix",
            vec![t(&[3, 2], 73), t(&[3, 4], 74), t(&[4, 2], 75)],
            Box::new(|x| x[0].addmm(&x[1], &x[2])),
        ),
        (
            "reshape",
            vec![t(&[2, 6], 48)],
            Box::new(|x| x[0].reshape([3, -1])?.exp()),
        ),
        (
            "transpose",
            vec![t(&[2, 3], 49)],
            Box::new(|x| x[0].t()?.matmul(&x[0])),
        ),
        (
            "permute",
            vec![t(&[2, 3, 4], 50)],
            Box::new(|x| x[0].permute([2, 0, 1])?.contiguous()),
        ),
        (
            "narrow",
            vec![t(&[5, 3], 51)],
            Box::new(|x| x[0].narrow(0, 1, 3)),
        ),
        (
            "squeeze unsqueeze",
            vec![t(&[3, 1], 52)],
            Box::new(|x| x[0].squeeze(1)?.unsqueeze(0)),
        ),
        (
            "broadcast_to",
            vec![t(&[3, 1], 53)],
            Box::new(|x| x[0].broadcast_to([2, 3, 4])),
        ),
        (
            "cat",
            vec![t(&[2, 3], 54), t(&[1, 3], 55)],
            Box::new(|x| Tensor::cat(&[&x[0], &x[1]], 0)),
        ),
        (
            "stack",
            vec![t(&[2, 3], 56), t(&[2, 3], 57)],
            Box::new(|x| Tensor::stack(&[&x[0], &x[1]], 1)),
        ),
        (
            "index_select repeats",
            vec![t(&[4, 3], 58)],
            Box::new(|x| {
                x[0].index_select(0, &Tensor::from_vec(vec![3i64, 0, 3], [3], Device::Cpu)?)
            }),
        ),
        (
            "to device and back",
            vec![t(&[4], 60)],
            Box::new(|x| x[0].to(&Device::Cuda(1))?.exp()?.cpu()),
        ),
        (
            "copy",
            vec![t(&[4], 61)],
            Box::new(|x| x[0].copy()?.mul(&x[0])),
        ),
        (
            "layer_norm with weight and bias",
            vec![t(&[3, 5], 62), positive(&[5], 63), t(&[5], 64)],
            Box::new(|x| x[0].layer_norm([5], Some(&x[1]), Some(&x[2]), 1e-5)),
        ),
        (
            "layer_norm over two dims, no affine",
            vec![t(&[2, 3, 4], 65)],
            Box::new(|x| x[0].layer_norm([3, 4], None, None, 1e-5)),
        ),
        (
            "layer_norm on a GPU",
            vec![t(&[4, 6], 66), positive(&[6], 67), t(&[6], 68)],
            Box::new(|x| {
                let gpu = Device::Cuda(1);
                let (w, b) = (x[1].to(&gpu)?, x[2].to(&gpu)?);
                x[0].to(&gpu)?
                    .layer_norm([6], Some(&w), Some(&b), 1e-5)?
                    .cpu()
            }),
        ),
    ];
    let mut wrong = Vec::new();
    for (name, inputs, f) in &cases {
        wrong.extend(check(name, inputs.clone(), f));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn no_grad_records_nothing_and_keeps_nothing_alive() {
    // Exact byte counts: cuda:2 is this test's alone (every test here simulates three devices
    // and the others allocate on cuda:0 and cuda:1 on parallel threads).
    stand_in::gpus(3, None).unwrap();
    let d = Device::Cuda(2);
    let w = Tensor::randn([256, 256], d)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let x = Tensor::randn([64, 256], d).unwrap();
    // A GPU's first GEMM takes cuBLAS's workspace, which stays (emulated devices too, as in
    // PyTorch): take it before counting.
    drop(no_grad(|| x.matmul(&w)).unwrap());
    let base = cuda::memory_allocated(2).unwrap();
    let y = x.matmul(&w).unwrap().relu().unwrap().sum_all().unwrap();
    assert!(y.requires_grad() && y.grad_fn() == Some(placelab::op::Op::Sum));
    let with_graph = cuda::memory_allocated(2).unwrap() - base;
    drop(y);
    let z = no_grad(|| x.matmul(&w).unwrap().relu().unwrap().sum_all().unwrap());
    assert!(!z.requires_grad() && z.grad_fn().is_none());
    let without = cuda::memory_allocated(2).unwrap() - base;
    assert!(
        without < with_graph,
        "the graph keeps activations alive: {with_graph} B vs {without} B without it"
    );
    assert_eq!(without, 512, "only the result remains");
}

#[test]
fn gradients_accumulate_live_on_the_device_and_can_be_cleared() {
    stand_in::gpus(3, None).unwrap();
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3], Device::Cuda(0))
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let loss = |x: &Tensor| x.mul(x).unwrap().sum_all().unwrap();
    loss(&x).backward().unwrap();
    let g = x.grad().unwrap();
    assert_eq!(
        (g.device(), g.to_vec::<f32>().unwrap()),
        (Device::Cuda(0), vec![2.0, 4.0, 6.0])
    );
    loss(&x).backward().unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec::<f32>().unwrap(),
        vec![4.0, 8.0, 12.0],
        "backward adds to .grad()"
    );
    x.zero_grad();
    assert!(x.grad().is_none());
    // Through a cast, the gradient comes back in the leaf's own dtype.
    let h = Tensor::from_vec(vec![1.5f32, -2.0], [2], Device::Cpu)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    h.to_dtype(DType::F64)
        .unwrap()
        .mul(3.0)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(
        (
            h.grad().unwrap().dtype(),
            h.grad().unwrap().to_vec::<f32>().unwrap()
        ),
        (DType::F32, vec![3.0, 3.0])
    );
    let d = x.detach();
    assert!(!d.requires_grad() && d.shares_storage_with(&x));
    assert!(loss(&d).backward().is_err());
}

#[test]
fn misuse_gets_clear_errors() {
    let x = Tensor::randn([3], Device::Cpu)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = x.exp().unwrap().sum_all().unwrap();
    y.backward().unwrap();
    let e = y.backward().unwrap_err().to_string();
    assert!(
        e.contains("already used by an earlier backward")
            && e.contains("recompute the forward pass"),
        "{e}"
    );

    let plain = Tensor::randn([3], Device::Cpu).unwrap().sum_all().unwrap();
    let e = plain.backward().unwrap_err().to_string();
    assert!(
        e.contains("does not require grad") && e.contains("requires_grad_(true)"),
        "{e}"
    );

    let v = x.mul(2.0).unwrap();
    let e = v.backward().unwrap_err().to_string();
    assert!(
        e.contains("one-element tensor") && e.contains("backward_with"),
        "{e}"
    );
    v.backward_with(&Tensor::ones([3], Device::Cpu).unwrap())
        .unwrap();

    let e = v.requires_grad_(false).unwrap_err().to_string();
    assert!(e.contains("only leaf tensors"), "{e}");
    let e = Tensor::arange(0, 3, Device::Cpu)
        .unwrap()
        .requires_grad_(true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Only float tensors can require gradients"),
        "{e}"
    );
}

/// A tensor of `layer_norm_cases.json` (`gen_layer_norm.py`), on `device`.
fn fixture_tensor(v: &serde_json::Value, device: Device) -> Option<Tensor> {
    let shape: Vec<usize> = serde_json::from_value(v.get("shape")?.clone()).ok()?;
    let data: Vec<f64> = serde_json::from_value(v["data"].clone()).unwrap();
    let dtype = DType::ALL
        .into_iter()
        .find(|d| d.name() == v["dtype"])
        .unwrap();
    Some(
        Tensor::from_vec(data, shape, device)
            .unwrap()
            .to_dtype(dtype)
            .unwrap(),
    )
}

/// Whether `got` holds `expected`'s dtype, shape and values, within what the dtype's rounding
/// allows (placelab sums the moments in f64, PyTorch in the dtype's own float).
fn assert_close(what: &str, got: &Tensor, expected: &Tensor) {
    assert_eq!(got.dtype(), expected.dtype(), "{what}: dtype");
    assert_eq!(got.shape(), expected.shape(), "{what}: shape");
    let tolerance = match expected.dtype() {
        DType::F64 => 1e-12,
        DType::F32 => 2e-5,
        _ => 2e-2,
    };
    let (g, e) = (got.to_f64_vec().unwrap(), expected.to_f64_vec().unwrap());
    for (i, (a, b)) in g.iter().zip(&e).enumerate() {
        assert!(
            (a - b).abs() <= tolerance * (1.0 + b.abs()),
            "{what}: element {i} is {a}, PyTorch's {b}"
        );
    }
}

/// `layer_norm` against PyTorch's on the CPU: outputs and the gradients of input, weight and
/// bias, in f32, f64, f16 and bf16, on the CPU and on a stand-in GPU (its kernels, in the
/// emulated run); and `nn::LayerNorm` as a user builds it.
#[test]
fn layer_norm_and_its_gradients_match_pytorch_on_every_device() {
    stand_in::gpus(3, None).unwrap();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/layer_norm_cases.json"
    );
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for device in [Device::Cpu, Device::Cuda(1)] {
        for case in fixture["cases"].as_array().unwrap() {
            let name = format!("{} on {device}", case["name"].as_str().unwrap());
            let inputs: Vec<Option<Tensor>> = (0..3)
                .map(|i| {
                    fixture_tensor(&case["inputs"][i], device)
                        .map(|t| t.requires_grad_(true).unwrap())
                })
                .collect();
            let normalized: Vec<usize> =
                serde_json::from_value(case["normalized_shape"].clone()).unwrap();
            let x = inputs[0].as_ref().unwrap();
            let eps = case["eps"].as_f64().unwrap();
            let y = x
                .layer_norm(normalized, inputs[1].as_ref(), inputs[2].as_ref(), eps)
                .unwrap();
            assert_close(&name, &y, &fixture_tensor(&case["output"], device).unwrap());
            let grad = fixture_tensor(&case["grad"], device).unwrap();
            y.mul(&grad).unwrap().sum_all().unwrap().backward().unwrap();
            for (i, input) in inputs.iter().enumerate() {
                if let Some(t) = input {
                    let expected = fixture_tensor(&case["grads"][i], device).unwrap();
                    assert_close(
                        &format!("{name}: gradient {i}"),
                        &t.grad().unwrap(),
                        &expected,
                    );
                }
            }
        }
        let module = &fixture["module"];
        let layer = nn::LayerNorm::new([10], device).unwrap();
        let x = fixture_tensor(&module["input"], device).unwrap();
        let out = layer.forward(&x).unwrap();
        assert_close(
            "nn::LayerNorm",
            &out,
            &fixture_tensor(&module["output"], device).unwrap(),
        );
        out.pow(2).unwrap().sum_all().unwrap().backward().unwrap();
        let (w, b) = (layer.weight.as_ref().unwrap(), layer.bias.as_ref().unwrap());
        assert_close(
            "its weight's gradient",
            &w.grad().unwrap(),
            &fixture_tensor(&module["weight_grad"], device).unwrap(),
        );
        assert_close(
            "its bias's gradient",
            &b.grad().unwrap(),
            &fixture_tensor(&module["bias_grad"], device).unwrap(),
        );
        assert_eq!(layer.parameters().len(), 2);
        assert!(x.grad().is_none(), "the data takes no gradient");
        // Autocast's rule, PyTorch's: layer norm runs in f32, so f16 in gives f32 out, and the
        // f16 input still gets its gradient in f16.
        let half = x
            .to_dtype(DType::F16)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let y = autocast(DType::F16, || layer.forward(&half))
            .unwrap()
            .unwrap();
        assert_eq!(y.dtype(), DType::F32, "on {device}");
        y.sum_all().unwrap().backward().unwrap();
        assert_eq!(half.grad().unwrap().dtype(), DType::F16);
        // A profile names it, one row forward and one for its backward (the input's gradient's
        // kernel, which an input that takes a gradient runs).
        let learned = x.detach().requires_grad_(true).unwrap();
        let p = profile(|| layer.forward(&learned)?.sum_all()?.backward());
        let rows: Vec<(placelab::op::Op, Option<placelab::op::Op>)> =
            p.rows().iter().map(|r| (r.op, r.grad_fn)).collect();
        use placelab::op::Op::{LayerNorm, LayerNormBackward};
        assert!(rows.contains(&(LayerNorm, None)), "{}", p.text());
        assert!(
            rows.contains(&(LayerNormBackward, Some(LayerNorm))),
            "{}",
            p.text()
        );
    }
}

/// Layer norm's mistakes get errors that say what to pass instead.
#[test]
fn layer_norm_says_what_is_wrong_with_its_arguments() {
    let x = Tensor::randn([2, 3], Device::Cpu).unwrap();
    let w = Tensor::ones([4], Device::Cpu).unwrap();
    let error = |r: Result<Tensor>| r.unwrap_err().to_string();
    let wrong_shape = error(x.layer_norm([4], None, None, 1e-5));
    assert!(
        wrong_shape.contains("must be the input's last dimensions")
            && wrong_shape.contains("`[3]`"),
        "{wrong_shape}"
    );
    let wrong_weight = error(x.layer_norm([3], Some(&w), None, 1e-5));
    assert!(
        wrong_weight.contains("weight has shape [4], but normalized_shape is [3]"),
        "{wrong_weight}"
    );
    let ints = Tensor::from_vec(vec![1i64, 2, 3], [3], Device::Cpu).unwrap();
    let int_error = error(ints.layer_norm([3], None, None, 1e-5));
    assert!(int_error.contains("to_dtype(DType::F32)"), "{int_error}");
    assert!(error(x.layer_norm([3], None, None, -1.0)).contains("eps must be a finite number"));
    let empty = nn::LayerNorm::new(Vec::<usize>::new(), Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(empty.contains("at least one dimension"), "{empty}");
}

/// The tests above, again on emulated devices: the CUDA backend and `kernels/*.cu` do the work.
#[test]
fn every_test_again_on_emulated_devices() {
    stand_in::rerun_emulated("every_test_again_on_emulated_devices");
}
