//! Property-based: random shapes (with 0- and 1-sized dimensions), dtypes and views, on the CPU
//! and a simulated GPU (then an emulated one), through the engine's ops. Whatever the input, an
//! op returns `Ok` or a clear `Err`, never panics; the CPU and the simulated GPU agree exactly
//! (the emulated one too, but for the ops `NOT_BITWISE_ON_A_GPU` names, within 16 ulps); float
//! results agree with plain reference loops (f64) here; shapes follow broadcasting.
//!
//! `PLACELAB_PROPTEST_CASES` sets the number of cases per property (default 1,000, about a
//! second; on the code before empty shapes were handled, the first case already failed).

#[path = "support/stand_in.rs"]
mod stand_in;

use placelab::prelude::*;
use proptest::prelude::*;

fn config() -> ProptestConfig {
    let cases = std::env::var("PLACELAB_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A view applied after the tensor is made; its numbers are reduced modulo the shape, so every
/// draw is a valid request or a request the engine must refuse with an `Err`.
#[derive(Debug, Clone)]
enum View {
    Plain,
    Transpose(usize, usize),
    Narrow(usize, usize, usize),
    /// All dimensions reversed.
    Permute,
    /// Prepend a dimension and expand the size-1 ones to these sizes.
    Broadcast(usize, Vec<usize>),
}

#[derive(Debug, Clone)]
struct Input {
    shape: Vec<usize>,
    values: Vec<f64>,
    dtype: DType,
    view: View,
}

fn dim_size() -> impl Strategy<Value = usize> {
    prop_oneof![2 => Just(0usize), 3 => Just(1usize), 5 => 2usize..=4]
}

fn view() -> impl Strategy<Value = View> {
    prop_oneof![
        3 => Just(View::Plain),
        1 => (0usize..4, 0usize..4).prop_map(|(a, b)| View::Transpose(a, b)),
        1 => (0usize..4, 0usize..5, 0usize..5).prop_map(|(d, s, l)| View::Narrow(d, s, l)),
        1 => Just(View::Permute),
        1 => (1usize..4, prop::collection::vec(1usize..4, 0..4)).prop_map(|(n, s)| View::Broadcast(n, s)),
    ]
}

fn input_with(shape: impl Strategy<Value = Vec<usize>>) -> impl Strategy<Value = Input> {
    (shape, prop::sample::select(DType::ALL.to_vec()), view()).prop_flat_map(|(shape, dtype, view)| {
        let n = shape.iter().product::<usize>();
        let value = prop_oneof![
            8 => -4.0f64..4.0,
            1 => Just(0.0),
            1 => prop::sample::select(vec![f64::NAN, f64::INFINITY, -f64::INFINITY, 1e30, -1e30]),
        ];
        prop::collection::vec(value, n).prop_map(move |values| Input {
            shape: shape.clone(),
            values,
            dtype,
            view: view.clone(),
        })
    })
}

fn input() -> impl Strategy<Value = Input> {
    input_with(prop::collection::vec(dim_size(), 0..=3))
}

/// Two inputs whose shapes broadcast (the second drops leading dimensions and sets some to 1),
/// or, one time in eight, shapes drawn apart, which may not.
fn pair() -> impl Strategy<Value = (Input, Input)> {
    prop::collection::vec(dim_size(), 0..=3).prop_flat_map(|a| {
        let rank = a.len();
        let first = a.clone();
        let related = (0..=rank, prop::collection::vec(any::<bool>(), rank)).prop_map(move |(drop, ones)| {
            first
                .iter()
                .zip(&ones)
                .skip(drop)
                .map(|(&d, &one)| if one { 1 } else { d })
                .collect::<Vec<usize>>()
        });
        let shape_b = prop_oneof![7 => related.boxed(), 1 => prop::collection::vec(dim_size(), 0..=3).boxed()];
        (input_with(Just(a)), input_with(shape_b))
    })
}

fn make(input: &Input, device: Device) -> Result<Tensor> {
    let base = Tensor::from_vec(input.values.clone(), input.shape.clone(), device)?
        .to_dtype(input.dtype)?;
    let rank = base.rank();
    match &input.view {
        View::Plain => Ok(base),
        View::Transpose(a, b) if rank > 0 => base.transpose(a % rank, b % rank),
        View::Transpose(a, b) => base.transpose(*a as i64, *b as i64),
        View::Narrow(d, s, l) if rank > 0 => {
            let size = base.shape()[d % rank];
            base.narrow(d % rank, s % (size + 1), l % (size + 1))
        }
        View::Narrow(d, s, l) => base.narrow(*d, *s, *l),
        View::Permute => base.permute((0..rank).rev().collect::<Vec<_>>()),
        View::Broadcast(lead, sizes) => {
            let mut shape = vec![*lead];
            for (i, &d) in base.shape().iter().enumerate() {
                shape.push(if d == 1 {
                    sizes.get(i).copied().unwrap_or(1)
                } else {
                    d
                });
            }
            base.broadcast_to(shape)
        }
    }
}

/// What an op gave: shape, dtype and values (as f64), or that it refused.
type Outcome = std::result::Result<(Vec<usize>, DType, Vec<f64>), String>;

fn outcome(t: Result<Tensor>) -> Outcome {
    let t = t.map_err(|e| e.to_string())?;
    let values = t.to_f64_vec().map_err(|e| e.to_string())?;
    assert_eq!(values.len(), t.numel(), "to_f64_vec returns every element");
    Ok((t.shape().to_vec(), t.dtype(), values))
}

type UnaryOp = (&'static str, fn(&Tensor) -> Result<Tensor>);
type BinaryOp = (&'static str, fn(&Tensor, &Tensor) -> Result<Tensor>);

const UNARY: &[UnaryOp] = &[
    ("neg", |x| x.neg()),
    ("abs", |x| x.abs()),
    ("relu", |x| x.relu()),
    ("exp", |x| x.exp()),
    ("log", |x| x.log()),
    ("sqrt", |x| x.sqrt()),
    ("sigmoid", |x| x.sigmoid()),
    ("tanh", |x| x.tanh()),
    ("gelu", |x| x.gelu()),
    ("clamp", |x| x.clamp(Some(-1.0), Some(1.0))),
    ("mul_scalar", |x| x.mul(2.0)),
    ("to_f32", |x| x.to_dtype(DType::F32)),
    ("to_i64", |x| x.to_dtype(DType::I64)),
    ("contiguous", |x| x.contiguous()),
    ("flatten", |x| x.flatten()),
    ("reshape_flat", |x| x.reshape([x.numel()])),
    ("unsqueeze", |x| x.unsqueeze(0)),
    ("squeeze_all", |x| x.squeeze_all()),
    ("t", |x| x.t()),
    ("narrow_first", |x| x.narrow(0, 0, 1)),
    ("sum_all", |x| x.sum_all()),
    ("mean_all", |x| x.mean_all()),
    ("max_all", |x| x.max_all()),
    ("min_all", |x| x.min_all()),
    ("argmax_all", |x| x.argmax_all()),
    ("sum_dim0", |x| x.sum(0, false)),
    ("mean_dim0", |x| x.mean(0, true)),
    ("max_dim0", |x| x.max(0, false)),
    ("argmax_dim0", |x| x.argmax(0, false)),
    ("softmax_last", |x| x.softmax(-1)),
    ("log_softmax_last", |x| x.log_softmax(-1)),
    ("gram", |x| x.matmul(&x.t()?)),
    ("cat_self", |x| Tensor::cat(&[x, x], 0)),
    ("stack_self", |x| Tensor::stack(&[x, x], 0)),
    ("index_select_0", |x| {
        let index = Tensor::from_vec(vec![0i64], [1], x.device())?;
        x.index_select(0, &index)
    }),
];

const BINARY: &[BinaryOp] = &[
    ("add", |a, b| a.add(b)),
    ("sub", |a, b| a.sub(b)),
    ("mul", |a, b| a.mul(b)),
    ("div", |a, b| a.div(b)),
    ("maximum", |a, b| a.maximum(b)),
    ("minimum", |a, b| a.minimum(b)),
    ("pow", |a, b| a.pow(b)),
    ("eq", |a, b| a.eq(b)),
    ("lt", |a, b| a.lt(b)),
    ("matmul", |a, b| a.matmul(b)),
    ("cat", |a, b| Tensor::cat(&[a, b], 0)),
];

/// Bitwise equality, with every NaN equal to every other.
fn same_values(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// Ops whose results an emulated GPU may give a few ulps away from the CPU's, and why: its
/// kernels call the C library's `exp`/`log`/`pow`/`tanh`/`erf` (as a GPU calls CUDA's, neither
/// correctly rounded) where the CPU backend has its own polynomials; GELU computes `1 + erf(x/√2)`
/// in the tensor's dtype, as PyTorch's CUDA kernel does, where it cancels for negative `x`; and
/// products run the CPU's GEMM on the transposed problem that cuBLAS is given (another order of
/// sums, and a +0 start where the CPU may give -0). Within 16 ulps of the larger of the two values
/// or 1. Reductions add in another order (blocks and a tree, against the CPU's 64 lanes), so
/// theirs is within 16 ulps of the sum of the inputs' magnitudes (`[1e30, -1e30, x]` sums to `x`
/// or 0 by order). Everything else is bit for bit.
const NOT_BITWISE_ON_A_GPU: &[&str] = &[
    "exp",
    "log",
    "sigmoid",
    "tanh",
    "gelu",
    "pow",
    "softmax_last",
    "log_softmax_last",
    "gram",
    "matmul",
];
const REDUCTIONS: &[&str] = &["sum_all", "mean_all", "sum_dim0", "mean_dim0"];

/// `cpu` and `gpu` within `ulps` units in the last place of `dtype`, relative to the larger of
/// them or `scale`.
fn within_ulps(cpu: &[f64], gpu: &[f64], dtype: DType, ulps: f64, scale: f64) -> bool {
    let eps = match dtype {
        DType::F64 => f64::EPSILON,
        DType::F32 => f32::EPSILON as f64,
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        _ => 0.0,
    };
    cpu.len() == gpu.len()
        && cpu.iter().zip(gpu).all(|(c, g)| {
            c.to_bits() == g.to_bits()
                || (c.is_nan() && g.is_nan())
                || (c - g).abs() <= ulps * eps * c.abs().max(g.abs()).max(scale)
        })
}

/// Whether the CPU's and the GPU's outcomes agree; `magnitude` is the sum of the finite inputs'
/// magnitudes (the scale of a reduction's rounding).
fn agree(
    name: &str,
    cpu: &Outcome,
    gpu: &Outcome,
    magnitude: f64,
) -> std::result::Result<(), TestCaseError> {
    match (cpu, gpu) {
        (Ok(c), Ok(g)) => {
            prop_assert_eq!(&c.0, &g.0, "{}: shapes differ between cpu and cuda:0", name);
            prop_assert_eq!(c.1, g.1, "{}: dtypes differ", name);
            let emulated = stand_in::kind() == placelab::device::StandIn::Emulated;
            let scale = if REDUCTIONS.contains(&name) {
                magnitude.max(1.0)
            } else {
                1.0
            };
            if emulated && (NOT_BITWISE_ON_A_GPU.contains(&name) || REDUCTIONS.contains(&name)) {
                prop_assert!(
                    within_ulps(&c.2, &g.2, c.1, 16.0, scale),
                    "{}: values differ by more than 16 ulps: cpu {:?} cuda:0 {:?}",
                    name,
                    c.2,
                    g.2
                );
                return Ok(());
            }
            prop_assert!(
                same_values(&c.2, &g.2),
                "{}: values differ: cpu {:?} cuda:0 {:?}",
                name,
                c.2,
                g.2
            );
        }
        (Err(_), Err(_)) => {}
        // What PyTorch's CUDA refuses and its CPU does (integer matmul): the simulated GPU
        // refuses it too, so a lesson behaves as on a real one.
        (Ok(_), Err(e)) if e.contains("on a CUDA device") => {}
        _ => prop_assert!(
            false,
            "{}: one device refused and the other did not: cpu {:?}, cuda:0 {:?}",
            name,
            cpu,
            gpu
        ),
    }
    Ok(())
}

/// NumPy's broadcasting, written out here to check the engine's.
fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let size = |s: &[usize]| {
                if i + s.len() >= n {
                    s[i + s.len() - n]
                } else {
                    1
                }
            };
            let (da, db) = (size(a), size(b));
            match (da, db) {
                (x, y) if x == y => Some(x),
                (1, y) => Some(y),
                (x, 1) => Some(x),
                _ => None,
            }
        })
        .collect()
}

/// The element of a row-major `values` of `shape` that broadcast index `at` (of `out`) reads.
fn broadcast_read(values: &[f64], shape: &[usize], out: &[usize], at: usize) -> f64 {
    let mut rem = at;
    let mut index = 0;
    let mut stride = 1;
    for (k, &size) in out.iter().enumerate().rev() {
        let coord = rem % size.max(1);
        rem /= size.max(1);
        let offset = out.len() - shape.len();
        if k >= offset {
            let d = shape[k - offset];
            index += if d == 1 { 0 } else { coord * stride };
            stride *= d;
        }
    }
    values[index]
}

fn close(got: f64, want: f64, tol: f64) -> bool {
    (got.is_nan() && want.is_nan()) || got == want || (got - want).abs() <= tol * (1.0 + want.abs())
}

/// The reference value as the result dtype holds it (an f32 product of two 1e30 is inf).
fn rounded(v: f64, dtype: DType) -> f64 {
    if dtype == DType::F32 {
        v as f32 as f64
    } else {
        v
    }
}

fn exact_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn unary_ops_never_panic_and_agree_across_devices(x in input()) {
        stand_in::gpus(2, None).unwrap();
        let values = make(&x, Device::Cpu).and_then(|t| t.to_f64_vec());
        for (name, op) in UNARY {
            let cpu = outcome(make(&x, Device::Cpu).and_then(|t| op(&t)));
            let gpu = outcome(make(&x, Device::Cuda(0)).and_then(|t| op(&t)));
            let finite = |v: &Vec<f64>| v.iter().filter(|a| a.is_finite()).map(|a| a.abs()).sum();
            let magnitude = values.as_ref().map_or(0.0, finite);
            agree(name, &cpu, &gpu, magnitude)?;
            let (Ok(v), Ok((shape, dtype, got))) = (&values, &cpu) else { continue };
            if !exact_float(x.dtype) {
                continue;
            }
            let tol = if *dtype == DType::F64 { 1e-12 } else { 1e-5 };
            let sum: f64 = v.iter().sum();
            match *name {
                "sum_all" => prop_assert!(close(got[0], rounded(sum, *dtype), tol * v.iter().map(|a| a.abs()).sum::<f64>().max(1.0)), "sum_all {:?} of {:?}", got, v),
                "mean_all" if v.is_empty() => prop_assert!(got[0].is_nan(), "the mean of nothing is NaN, got {:?}", got),
                "mean_all" => prop_assert!(close(got[0], sum / v.len() as f64, tol * v.iter().map(|a| a.abs()).sum::<f64>().max(1.0)), "mean_all {:?} of {:?}", got, v),
                "neg" => prop_assert!(got.iter().zip(v).all(|(g, a)| close(*g, -a, 0.0)), "neg"),
                "relu" => prop_assert!(got.iter().zip(v).all(|(g, a)| close(*g, if *a > 0.0 || a.is_nan() { *a } else { 0.0 }, 0.0)), "relu {:?} of {:?}", got, v),
                "exp" => prop_assert!(got.iter().zip(v).all(|(g, a)| close(*g, rounded(a.exp(), *dtype), tol)), "exp {:?} of {:?}", got, v),
                "flatten" | "contiguous" => prop_assert!(same_values(got, v), "{} changed values", name),
                "max_all" if !v.is_empty() => {
                    let want = if v.iter().any(|a| a.is_nan()) { f64::NAN } else { v.iter().copied().fold(f64::NEG_INFINITY, f64::max) };
                    prop_assert!(close(got[0], want, 0.0), "max_all {:?} of {:?}", got, v);
                }
                "gram" if shape.len() == 2 => {
                    // x · xᵀ by plain loops, in f64.
                    let view = make(&x, Device::Cpu).unwrap();
                    let (m, k) = (view.shape()[0], view.shape()[1]);
                    for i in 0..m {
                        for j in 0..m {
                            let want: f64 = (0..k).map(|c| v[i * k + c] * v[j * k + c]).sum();
                            let scale: f64 = (0..k).map(|c| (v[i * k + c] * v[j * k + c]).abs()).sum();
                            let g = got[i * m + j];
                            prop_assert!(
                                (g.is_nan() && want.is_nan()) || !rounded(want, *dtype).is_finite() || !scale.is_finite() || (g - want).abs() <= tol * 4.0 * (1.0 + scale),
                                "gram[{}][{}] = {} but the loops give {}", i, j, g, want
                            );
                        }
                    }
                }
                _ => {}
            }
            if *name == "max_all" && v.is_empty() {
                prop_assert!(false, "the max of an empty tensor must be an error, got shape {:?}", shape);
            }
        }
    }

    #[test]
    fn binary_ops_broadcast_never_panic_and_agree(pair in pair()) {
        stand_in::gpus(2, None).unwrap();
        let (a, b) = pair;
        let av = make(&a, Device::Cpu).and_then(|t| Ok((t.shape().to_vec(), t.to_f64_vec()?)));
        let bv = make(&b, Device::Cpu).and_then(|t| Ok((t.shape().to_vec(), t.to_f64_vec()?)));
        for (name, op) in BINARY {
            let on = |d: Device| outcome(make(&a, d).and_then(|x| op(&x, &make(&b, d)?)));
            let cpu = on(Device::Cpu);
            agree(name, &cpu, &on(Device::Cuda(0)), 0.0)?;
            let (Ok((sa, va)), Ok((sb, vb))) = (&av, &bv) else { continue };
            if !matches!(*name, "add" | "sub" | "mul" | "div" | "maximum" | "minimum") {
                continue;
            }
            if !(exact_float(a.dtype) && exact_float(b.dtype)) {
                // Other dtypes may be refused (bool arithmetic); only the no-panic and
                // cross-device properties apply to them.
                continue;
            }
            let expected = broadcast(sa, sb);
            match (&cpu, &expected) {
                (Ok((shape, dtype, got)), Some(out)) => {
                    prop_assert_eq!(shape, out, "{} of {:?} and {:?}", name, sa, sb);
                    let tol = if *dtype == DType::F64 { 1e-12 } else { 1e-6 };
                    for (i, g) in got.iter().enumerate() {
                        // Computed in the result's dtype, as PyTorch does: an f64 0-d operand
                        // of an f32 tensor is rounded to f32 first (1e30 - 1e30 is 0 there).
                        let (x, y) = (broadcast_read(va, sa, out, i), broadcast_read(vb, sb, out, i));
                        let (x, y) = (rounded(x, *dtype), rounded(y, *dtype));
                        let want = match *name {
                            "add" => x + y,
                            "sub" => x - y,
                            "mul" => x * y,
                            "div" => x / y,
                            "maximum" => if x.is_nan() || y.is_nan() { f64::NAN } else { x.max(y) },
                            _ => if x.is_nan() || y.is_nan() { f64::NAN } else { x.min(y) },
                        };
                        let want = rounded(want, *dtype);
                        prop_assert!(close(*g, want, tol), "{}[{}] = {} but {} {} {} = {}", name, i, g, x, name, y, want);
                    }
                }
                (Err(_), None) => {}
                (Ok((shape, ..)), None) => prop_assert!(false, "{} of {:?} and {:?} gave {:?}; they do not broadcast", name, sa, sb, shape),
                (Err(e), Some(out)) => prop_assert!(false, "{} of {:?} and {:?} should give {:?}: {}", name, sa, sb, out, e),
            }
        }
    }
}

// The kernel paths that start above the sizes drawn here: sums over leading dims in blocks of
// 4096 rows, matrix products split by rows over threads, the optimizer's in-place update.

fn close_all(got: &[f64], want: &[f64], rel: f64) -> std::result::Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} values, expected {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= rel * w.abs().max(1.0);
        if !ok {
            return Err(format!("[{i}] = {g}, expected {w}"));
        }
    }
    Ok(())
}

#[test]
fn sums_over_leading_dims_match_f64_loops() {
    for device in [Device::Cpu, Device::Cuda(0)] {
        if device.is_cuda() {
            stand_in::gpus(2, None).unwrap();
        }
        for shape in [
            vec![5000, 3],
            vec![64, 128],
            vec![9000, 1],
            vec![0, 4],
            vec![70, 3, 5],
        ] {
            let x = Tensor::randn(shape.clone(), device).unwrap();
            let v = x.to_f64_vec().unwrap();
            let kept: usize = shape[1..].iter().product();
            let rows = shape[0];
            let mut want = vec![0.0; kept];
            for r in 0..rows {
                for c in 0..kept {
                    want[c] += v[r * kept + c];
                }
            }
            let got = x.sum(0, false).unwrap();
            assert_eq!(got.shape(), &shape[1..], "{shape:?} on {device}");
            close_all(&got.to_f64_vec().unwrap(), &want, 1e-5)
                .unwrap_or_else(|e| panic!("sum over dim 0 of {shape:?} on {device}: {e}"));
            let mean: Vec<f64> = want.iter().map(|s| s / rows as f64).collect();
            let got = x.mean(0, true).unwrap().to_f64_vec().unwrap();
            close_all(&got, &mean, 1e-5).unwrap_or_else(|e| panic!("mean of {shape:?}: {e}"));
        }
        // Over the two leading dims of a 3-D tensor, as a bias gradient of a batched layer.
        let x = Tensor::randn([70, 3, 5], device).unwrap();
        let v = x.to_f64_vec().unwrap();
        let want: Vec<f64> = (0..5)
            .map(|c| (0..210).map(|r| v[r * 5 + c]).sum())
            .collect();
        let got = x.sum(&[0i64, 1][..], false).unwrap().to_f64_vec().unwrap();
        close_all(&got, &want, 1e-5).unwrap();
        // Integers wrap as PyTorch's do; NaN and infinities propagate down their column.
        let big = Tensor::from_vec(vec![i64::MAX, 1, 1, 2], [2, 2], device).unwrap();
        assert_eq!(
            big.sum(0, false).unwrap().to_vec::<i64>().unwrap(),
            [i64::MIN, 3]
        );
        let odd = Tensor::from_vec(
            vec![f32::NAN, 1.0, f32::INFINITY, 2.0, 3.0, f32::NEG_INFINITY],
            [2, 3],
            device,
        )
        .unwrap();
        let s = odd.sum(0, false).unwrap().to_vec::<f32>().unwrap();
        assert!(s[0].is_nan() && s[1] == 4.0 && s[2].is_nan(), "{s:?}");
    }
}

fn matmul_f64(a: &[f64], b: &[f64], (m, n, k): (usize, usize, usize)) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                out[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    out
}

#[test]
fn products_split_over_threads_match_f64_loops() {
    let cpu = Device::Cpu;
    // Row counts that do and do not divide by the thread count, operands plain and transposed.
    for (m, n, k) in [
        (100, 50, 300),
        (33, 257, 129),
        (1, 4096, 512),
        (257, 3, 2000),
    ] {
        let a = Tensor::randn([m, k], cpu).unwrap();
        let b = Tensor::randn([k, n], cpu).unwrap();
        let want = matmul_f64(
            &a.to_f64_vec().unwrap(),
            &b.to_f64_vec().unwrap(),
            (m, n, k),
        );
        let plain = a.matmul(&b).unwrap().to_f64_vec().unwrap();
        close_all(&plain, &want, 1e-4).unwrap_or_else(|e| panic!("{m}×{k}·{k}×{n}: {e}"));
        let at = a.t().unwrap().contiguous().unwrap().t().unwrap();
        let bt = b.t().unwrap().contiguous().unwrap().t().unwrap();
        let strided = at.matmul(&bt).unwrap().to_f64_vec().unwrap();
        close_all(&strided, &want, 1e-4).unwrap_or_else(|e| panic!("transposed {m}×{k}: {e}"));
    }
    // A batch of products, each above the split threshold, and a broadcast right-hand side.
    let a = Tensor::randn([3, 64, 200], cpu).unwrap();
    let b = Tensor::randn([200, 100], cpu).unwrap();
    let (av, bv) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    let got = a.matmul(&b).unwrap().to_f64_vec().unwrap();
    for i in 0..3 {
        let want = matmul_f64(&av[i * 64 * 200..(i + 1) * 64 * 200], &bv, (64, 100, 200));
        close_all(&got[i * 6400..(i + 1) * 6400], &want, 1e-4).unwrap();
    }
}

#[test]
fn in_place_updates_equal_the_out_of_place_arithmetic() {
    // `add_scaled_` (the optimizers' update) on a contiguous parameter, a transposed one (the
    // out-of-place fallback) and f64, bit for bit against `p + alpha·g`.
    for (shape, dtype) in [([300, 700], DType::F32), ([7, 5], DType::F64)] {
        let p = Tensor::randn(shape, dtype).unwrap();
        let g = Tensor::randn(shape, dtype).unwrap();
        let want = p.add(g.mul(-0.01).unwrap()).unwrap().to_f64_vec().unwrap();
        p.add_scaled_(&g, -0.01).unwrap();
        assert_eq!(p.to_f64_vec().unwrap(), want, "{shape:?} {dtype}");
        let pt = Tensor::randn([shape[1], shape[0]], dtype)
            .unwrap()
            .t()
            .unwrap();
        let want = pt.add(g.mul(0.5).unwrap()).unwrap().to_f64_vec().unwrap();
        pt.add_scaled_(&g, 0.5).unwrap();
        assert_eq!(pt.to_f64_vec().unwrap(), want, "transposed {shape:?}");
    }
    let p = Tensor::zeros([2, 2], ()).unwrap();
    assert!(p.add_scaled_(&Tensor::ones([3], ()).unwrap(), 1.0).is_err());
}

#[test]
fn softmax_rows_match_f64_within_f32_rounding() {
    // Long rows (the vectorised path, summed in runs of 1024 and a ragged tail), values spread
    // over ±80, a masked (-inf) entry, an all -inf row (NaN, as PyTorch gives) and a NaN row.
    let (rows, len) = (37, 2059);
    let mut v: Vec<f32> = Tensor::randn([rows * len], ())
        .unwrap()
        .mul(30.0)
        .unwrap()
        .to_vec()
        .unwrap();
    v[5] = f32::NEG_INFINITY;
    v[len..2 * len].fill(f32::NEG_INFINITY);
    v[2 * len + 7] = f32::NAN;
    let x = Tensor::from_vec(v.clone(), [rows, len], ()).unwrap();
    for log in [false, true] {
        let got = if log { x.log_softmax(1) } else { x.softmax(1) };
        let got = got.unwrap().to_vec::<f32>().unwrap();
        for r in 0..rows {
            let row: Vec<f64> = v[r * len..(r + 1) * len]
                .iter()
                .map(|&x| x as f64)
                .collect();
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row.iter().map(|x| (x - m).exp()).sum();
            for c in 0..len {
                let g = got[r * len + c] as f64;
                let want = if log {
                    row[c] - m - sum.ln()
                } else {
                    (row[c] - m).exp() / sum
                };
                if r == 1 || r == 2 {
                    assert!(g.is_nan(), "row {r} (all -inf or NaN) gives NaN, got {g}");
                    continue;
                }
                // log-softmax subtracts numbers of the inputs' size: its error is absolute.
                let tol = if log {
                    1e-6 * (1.0 + (row[c] - m).abs())
                } else {
                    1e-5 * want.abs() + 1e-37
                };
                let ok = (g - want).abs() <= tol || (want.is_infinite() && g == want);
                assert!(ok, "log={log} [{r}, {c}] = {g}, expected {want}");
            }
        }
    }
}

#[test]
fn transposed_copies_put_every_element_in_place() {
    // Tiles of 32 rows in 8×8 blocks, partial tiles, ragged columns, a batch dim, and a cast on
    // the way (`to_dtype` of a transposed view walks the same path).
    for (batch, rows, cols) in [
        (1, 64, 2048),
        (1, 70, 45),
        (3, 40, 33),
        (2, 32, 8),
        (1, 5, 3),
    ] {
        let x = Tensor::randn([batch, rows, cols], ()).unwrap();
        let v = x.to_vec::<f32>().unwrap();
        let t = x.transpose(1, 2).unwrap();
        let got = t.contiguous().unwrap().to_vec::<f32>().unwrap();
        let half = t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
        for b in 0..batch {
            for c in 0..cols {
                for r in 0..rows {
                    let want = v[(b * rows + r) * cols + c];
                    let at = (b * cols + c) * rows + r;
                    assert_eq!(got[at], want, "[{b}, {c}, {r}] of {batch}×{rows}×{cols}ᵀ");
                    assert_eq!(half[at], want as f64);
                }
            }
        }
    }
}

/// The tests above, again on emulated devices: the CUDA backend and `kernels/*.cu` do the work.
#[test]
fn every_test_again_on_emulated_devices() {
    stand_in::rerun_emulated("every_test_again_on_emulated_devices");
}
