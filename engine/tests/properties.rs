//! Property-based: random shapes (with 0- and 1-sized dimensions), all eight dtypes, values with
//! NaN, ±inf and 1e30, and views (transpose, narrow, permute, broadcast), through the engine's
//! ops. For every draw:
//! - the view equals the reference's, built from the raw numbers with index arithmetic here;
//! - every op gives what `properties/ops.rs` computes from that reference (PyTorch's dtype rules,
//!   f64 or wrapping-i64 loops, a tolerance per op stated there), or refuses where PyTorch does;
//! - an op never panics;
//! - the CPU and cuda:0 agree bit for bit. On *simulated* devices cuda:0 runs the CPU's kernels,
//!   so this proves only the dispatch (devices, dtypes, refusals); on *emulated* devices
//!   (`every_test_again_on_emulated_devices`) it runs `kernels/*.cu` through the CUDA backend,
//!   and agreement there checks those kernels (within 16 ulps for the ops
//!   `NOT_BITWISE_ON_A_GPU` names).
//!
//! `PLACELAB_PROPTEST_CASES` sets the number of cases per property (default 1,000, a few
//! seconds). A failing case is saved to `engine/tests/properties.proptest-regressions` (commit it) and
//! replayed first in every later run.

#[path = "support/stand_in.rs"]
mod stand_in;

#[path = "properties/kernels.rs"]
mod kernels;
#[path = "properties/ops.rs"]
mod ops;
#[path = "properties/reference.rs"]
mod reference;

use placelab::prelude::*;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use reference::{Num, Ref};

fn config() -> ProptestConfig {
    let cases = std::env::var("PLACELAB_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
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

/// The same view, made by the reference from the raw numbers; None where the engine must refuse.
fn reference_view(input: &Input) -> Option<Ref> {
    let base = Ref::new(&input.values, &input.shape, input.dtype);
    let rank = base.shape.len();
    match &input.view {
        View::Plain => Some(base),
        View::Transpose(a, b) => base.transpose(*a, *b),
        View::Narrow(d, s, l) if rank > 0 => {
            let size = base.shape[d % rank];
            base.narrow(d % rank, s % (size + 1), l % (size + 1))
        }
        View::Narrow(..) => None,
        View::Permute => Some(base.reversed_dims()),
        View::Broadcast(lead, sizes) => {
            let mut shape = vec![*lead];
            for (i, &d) in base.shape.iter().enumerate() {
                shape.push(if d == 1 {
                    sizes.get(i).copied().unwrap_or(1)
                } else {
                    d
                });
            }
            base.broadcast(&shape)
        }
    }
}

/// What an op gave: shape, dtype and values read in their own type, or that it refused.
type Outcome = std::result::Result<(Vec<usize>, DType, Vec<Num>), String>;

fn outcome(t: Result<Tensor>) -> Outcome {
    let t = t.map_err(|e| e.to_string())?;
    let read = |t: &Tensor| -> Result<Vec<Num>> {
        let f = |v: Vec<f64>| v.into_iter().map(Num::F).collect();
        let i = |v: Vec<i64>| v.into_iter().map(Num::I).collect();
        Ok(match t.dtype() {
            DType::F64 => f(t.to_vec::<f64>()?),
            DType::F32 => f(t.to_vec::<f32>()?.into_iter().map(f64::from).collect()),
            DType::F16 => f(t
                .to_vec::<half::f16>()?
                .into_iter()
                .map(f64::from)
                .collect()),
            DType::BF16 => f(t
                .to_vec::<half::bf16>()?
                .into_iter()
                .map(f64::from)
                .collect()),
            DType::I64 => i(t.to_vec::<i64>()?),
            DType::I32 => i(t.to_vec::<i32>()?.into_iter().map(i64::from).collect()),
            DType::U8 => i(t.to_vec::<u8>()?.into_iter().map(i64::from).collect()),
            DType::Bool => i(t.to_vec::<bool>()?.into_iter().map(i64::from).collect()),
        })
    };
    let values = read(&t).map_err(|e| e.to_string())?;
    assert_eq!(values.len(), t.numel(), "to_vec returns every element");
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
    ("to_f64", |x| x.to_dtype(DType::F64)),
    ("to_f32", |x| x.to_dtype(DType::F32)),
    ("to_f16", |x| x.to_dtype(DType::F16)),
    ("to_bf16", |x| x.to_dtype(DType::BF16)),
    ("to_i64", |x| x.to_dtype(DType::I64)),
    ("to_i32", |x| x.to_dtype(DType::I32)),
    ("to_u8", |x| x.to_dtype(DType::U8)),
    ("to_bool", |x| x.to_dtype(DType::Bool)),
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
    ("argmin_all", |x| x.argmin_all()),
    ("sum_dim0", |x| x.sum(0, false)),
    ("mean_dim0_keep", |x| x.mean(0, true)),
    ("max_dim0", |x| x.max(0, false)),
    ("min_dim0", |x| x.min(0, false)),
    ("argmax_dim0", |x| x.argmax(0, false)),
    ("argmin_dim0", |x| x.argmin(0, false)),
    ("softmax_last", |x| x.softmax(-1)),
    ("log_softmax_last", |x| x.log_softmax(-1)),
    ("gram", |x| x.matmul(&x.t()?)),
    ("cat_self", |x| Tensor::cat(&[x, x], 0)),
    ("stack_self", |x| Tensor::stack(&[x, x], 0)),
    ("index_select_rev", |x| {
        let n = x.shape().first().copied().unwrap_or(1) as i64;
        let index = Tensor::from_vec((0..n).rev().collect::<Vec<i64>>(), [n as usize], x.device())?;
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
    ("where_positive", |a, b| {
        Tensor::where_cond(&a.gt(0.0)?, a, b)
    }),
];

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
const REDUCTIONS: &[&str] = &["sum_all", "mean_all", "sum_dim0", "mean_dim0_keep"];

/// Whether the CPU's and cuda:0's outcomes agree; `magnitude` is the sum of the finite inputs'
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
            let emulated = stand_in::kind() == stand_in::StandIn::Emulated;
            let loose =
                emulated && (NOT_BITWISE_ON_A_GPU.contains(&name) || REDUCTIONS.contains(&name));
            let scale = if REDUCTIONS.contains(&name) {
                magnitude.max(1.0)
            } else {
                1.0
            };
            let same = c.2.len() == g.2.len()
                && c.2.iter().zip(&g.2).all(|(x, y)| match (x, y) {
                    (Num::F(x), Num::F(y)) => {
                        x.to_bits() == y.to_bits()
                            || (x.is_nan() && y.is_nan())
                            || (loose
                                && (x - y).abs()
                                    <= 16.0 * reference::ulp(c.1, x.abs().max(y.abs()).max(scale)))
                    }
                    (x, y) => x == y,
                });
            prop_assert!(
                same,
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

/// The engine's outcome against the reference's.
fn matches(
    what: &str,
    got: &Outcome,
    want: Option<reference::Want>,
) -> std::result::Result<(), TestCaseError> {
    match (got, want) {
        (Ok((shape, dtype, values)), Some(want)) => {
            if let Err(e) = want.check(shape, *dtype, values) {
                prop_assert!(false, "{}: {}", what, e);
            }
        }
        (Err(_), None) => {}
        (Ok((shape, dtype, _)), None) => prop_assert!(
            false,
            "{}: gave {} {:?} where it must refuse",
            what,
            dtype,
            shape
        ),
        (Err(e), Some(want)) => prop_assert!(
            false,
            "{}: refused ({}) where the reference gives {} {:?}",
            what,
            e,
            want.dtype,
            want.shape
        ),
    }
    Ok(())
}

fn magnitude(r: &Option<Ref>) -> f64 {
    r.as_ref().map_or(0.0, |r| {
        r.values
            .iter()
            .map(|v| v.f().abs())
            .filter(|a| a.is_finite())
            .sum()
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn unary_ops_match_the_reference_on_every_device(x in input()) {
        stand_in::gpus(2, None).unwrap();
        let view = reference_view(&x);
        matches(&format!("the view {:?}", x.view), &outcome(make(&x, Device::Cpu)), view.as_ref().map(Ref::exact))?;
        for (name, op) in UNARY {
            let cpu = outcome(make(&x, Device::Cpu).and_then(|t| op(&t)));
            let gpu = outcome(make(&x, Device::Cuda(0)).and_then(|t| op(&t)));
            agree(name, &cpu, &gpu, magnitude(&view))?;
            if let Some(r) = &view {
                matches(&format!("{name} of {r:?}"), &cpu, ops::unary(name, r))?;
            }
        }
    }

    #[test]
    fn binary_ops_match_the_reference_on_every_device(pair in pair()) {
        stand_in::gpus(2, None).unwrap();
        let (a, b) = pair;
        let (ra, rb) = (reference_view(&a), reference_view(&b));
        for (name, op) in BINARY {
            let on = |d: Device| outcome(make(&a, d).and_then(|x| op(&x, &make(&b, d)?)));
            let cpu = on(Device::Cpu);
            agree(name, &cpu, &on(Device::Cuda(0)), 0.0)?;
            if let (Some(ra), Some(rb)) = (&ra, &rb) {
                matches(&format!("{name} of {ra:?} and {rb:?}"), &cpu, ops::binary(name, ra, rb))?;
            }
        }
    }
}

/// The tests above, again on emulated devices: the CUDA backend and `kernels/*.cu` do the work.
#[test]
fn every_test_again_on_emulated_devices() {
    stand_in::rerun_emulated("every_test_again_on_emulated_devices");
}
