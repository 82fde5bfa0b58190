//! What each op of the property test should give, computed from the reference tensors of
//! `reference.rs`, and the tolerance each op is allowed, with why. `None`: the op must refuse.

use super::reference::*;
use placelab::DType;

// Where placelab gives another answer than PyTorch on purpose (checked with torch on the CPU),
// the reference follows placelab and says so at the op: `abs` of bools, `gelu` of integers,
// `pow` of integers to negative powers, `cat` with a 1-d empty tensor.

// Tolerances. Every op not named below is exact: shape ops, casts, comparisons, max/min and
// their indices, where, cat, index_select move or pick values; add, sub, mul, div, sqrt and
// clamp are one IEEE operation, correctly rounded, in the engine and here (an f64 result of
// f32 operands rounded to f32 is the f32 operation's result). The others: POLY_ULPS for the
// polynomial ops, sums within one unit per term, products within one unit per term of the sum
// of their magnitudes, and a half result one unit more (`with_half_rounding`).

/// Units of the compute type's epsilon that an op's own polynomial (exp, log, tanh, sigmoid,
/// pow) may be off, relative to the result: they are not correctly rounded (nor are PyTorch's
/// or CUDA's), a few units is what a good one keeps.
const POLY_ULPS: f64 = 4.0;

fn exact_map(x: &Ref, dtype: DType, f: impl Fn(f64) -> f64) -> Want {
    map_float(x, dtype, f, |_, _| 0.0)
}

fn ints_or(x: &Ref, dtype: DType, g: impl Fn(i64) -> i64, f: impl Fn(f64) -> f64) -> Want {
    if dtype.is_float() {
        return exact_map(x, dtype, f);
    }
    let values = x.values.iter().map(|v| to_dtype(Num::I(g(int(*v))), dtype));
    Want::exact(x.shape.clone(), dtype, values.collect())
}

/// An integer or bool element's value.
fn int(v: Num) -> i64 {
    match v {
        Num::I(i) => i,
        Num::F(x) => panic!("{x} is not an integer element"),
    }
}

fn poly(x: &Ref, f: impl Fn(f64) -> f64) -> Want {
    let d = float_of(x.dtype);
    let c = compute(d);
    map_float(x, d, f, move |_, y| POLY_ULPS * ulp(c, y))
}

fn nan_or(x: f64, f: impl Fn(f64) -> f64) -> f64 {
    if x.is_nan() { x } else { f(x) }
}

/// A sum (or mean, `divide`) over each fibre: integers wrap in i64, floats within one unit per
/// term of the sum of magnitudes (another order of adding), plus one unit of a half result.
fn sums(kept: Vec<usize>, fibres: Vec<Vec<Num>>, dtype: DType, divide: bool) -> Option<Want> {
    if divide && !dtype.is_float() {
        return None; // PyTorch: "mean(): could not infer output dtype".
    }
    let out = if dtype.is_float() { dtype } else { DType::I64 };
    let c = compute(out);
    let mut values = Vec::new();
    let mut tol = Vec::new();
    for f in &fibres {
        if !out.is_float() {
            values.push(Num::I(f.iter().fold(0i64, |s, v| s.wrapping_add(int(*v)))));
            tol.push(0.0);
            continue;
        }
        let n = f.len() as f64;
        let s: f64 = f.iter().map(|v| v.f()).sum();
        let mag: f64 = f.iter().map(|v| v.f().abs()).sum();
        let (s, mag) = if divide { (s / n, mag / n) } else { (s, mag) };
        values.push(to_dtype(Num::F(s), out));
        tol.push(n * ulp(c, mag) + ulp(out, s));
    }
    Some(Want {
        shape: kept,
        dtype: out,
        values,
        tol,
    })
}

fn extremes(
    kept: Vec<usize>,
    fibres: Vec<Vec<Num>>,
    dtype: DType,
    largest: bool,
    index: bool,
) -> Option<Want> {
    if index && dtype == DType::Bool {
        return None; // PyTorch: "argmax(): does not support bool input".
    }
    let mut values = Vec::new();
    for f in &fibres {
        let at = arg_extreme(f, largest)?;
        values.push(if index { Num::I(at as i64) } else { f[at] });
    }
    let dtype = if index { DType::I64 } else { dtype };
    Some(Want::exact(kept, dtype, values))
}

/// The fibres of a reduction over dim 0; a 0-d tensor is its own one fibre.
fn dim0(x: &Ref) -> (Vec<usize>, Vec<Vec<Num>>) {
    if x.shape.is_empty() {
        (vec![], vec![x.values.clone()])
    } else {
        x.fibres(0)
    }
}

fn softmax(x: &Ref, log: bool) -> Option<Want> {
    if !x.dtype.is_float() {
        return None; // PyTorch: "softmax_lastdim_kernel_impl" not implemented for ints.
    }
    let c = compute(x.dtype);
    // Over the last dimension, whose rows are contiguous; a 0-d tensor is one row of one.
    let row_len = x.shape.last().copied().unwrap_or(1);
    let mut values = Vec::new();
    let mut tol = Vec::new();
    for row in x.values.chunks(row_len.max(1)) {
        let row: Vec<f64> = row.iter().map(|v| v.f()).collect();
        let m = if row.iter().any(|v| v.is_nan()) {
            f64::NAN
        } else {
            row.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        };
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        for v in &row {
            let y = if log {
                v - m - s.ln()
            } else {
                (v - m).exp() / s
            };
            // Each exp within a few units, and their sum: twice the polynomial's error,
            // relative to the result for softmax; log-softmax subtracts numbers of the
            // inputs' size, so its error is relative to those.
            let scale = if log { (v - m).abs() + s.ln().abs() } else { y };
            values.push(to_dtype(Num::F(y), x.dtype));
            tol.push(2.0 * POLY_ULPS * ulp(c, scale) + ulp(x.dtype, y));
        }
    }
    Some(Want {
        shape: x.shape.clone(),
        dtype: x.dtype,
        values,
        tol,
    })
}

/// `a @ b` with PyTorch's rules for 1-d operands and broadcast batch dimensions.
pub fn matmul(a: &Ref, b: &Ref) -> Option<Want> {
    if a.dtype != b.dtype || a.dtype == DType::Bool || a.shape.is_empty() || b.shape.is_empty() {
        return None;
    }
    let a2 = if a.shape.len() == 1 {
        a.reshape(vec![1, a.shape[0]])
    } else {
        a.clone()
    };
    let b2 = if b.shape.len() == 1 {
        b.reshape(vec![b.shape[0], 1])
    } else {
        b.clone()
    };
    let (ra, rb) = (a2.shape.len(), b2.shape.len());
    let (m, k, k2, n) = (
        a2.shape[ra - 2],
        a2.shape[ra - 1],
        b2.shape[rb - 2],
        b2.shape[rb - 1],
    );
    if k != k2 {
        return None;
    }
    let batch = broadcast_shapes(&a2.shape[..ra - 2], &b2.shape[..rb - 2])?;
    let a3 = a2.broadcast(&[batch.clone(), vec![m, k]].concat())?;
    let b3 = b2.broadcast(&[batch.clone(), vec![k, n]].concat())?;
    let mut values = Vec::new();
    let mut tol = Vec::new();
    for i in 0..batch.iter().product() {
        let (av, bv) = (
            &a3.values[i * m * k..(i + 1) * m * k],
            &b3.values[i * k * n..(i + 1) * k * n],
        );
        let (v, t) = product(av, bv, (m, k, n), a.dtype, k.max(1) as f64);
        values.extend(v);
        tol.extend(t);
    }
    let mut shape = batch;
    if a.shape.len() > 1 {
        shape.push(m);
    }
    if b.shape.len() > 1 {
        shape.push(n);
    }
    Some(Want {
        shape,
        dtype: a.dtype,
        values,
        tol,
    })
}

pub fn unary(name: &str, x: &Ref) -> Option<Want> {
    let d = x.dtype;
    let rank = x.shape.len();
    let numel = x.values.len();
    let cast = |to: DType| Some(x.cast(to).exact());
    match name {
        "neg" | "relu" if d == DType::Bool => None,
        "neg" => Some(ints_or(x, d, i64::wrapping_neg, |v| -v)),
        // placelab returns a bool tensor as it is (as NumPy); PyTorch refuses.
        "abs" if d == DType::Bool => Some(x.exact()),
        "abs" => Some(ints_or(x, d, i64::wrapping_abs, f64::abs)),
        "relu" => Some(ints_or(x, d, |i| i.max(0), |v| nan_or(v, |v| v.max(0.0)))),
        "exp" => Some(poly(x, f64::exp)),
        "log" => Some(poly(x, f64::ln)),
        "sqrt" => Some(exact_map(x, float_of(d), f64::sqrt)),
        "sigmoid" => Some(poly(x, |v| 1.0 / (1.0 + (-v).exp()))),
        "tanh" => Some(poly(x, f64::tanh)),
        // placelab converts ints and bools to f32 first, as for exp; PyTorch refuses them.
        // x·Φ(x) computed as x/2·(1 + erf(x/√2)) in the compute type, as PyTorch's kernel: the
        // sum cancels for negative x, so its error is absolute, a few units of |x|.
        "gelu" => {
            let c = compute(d);
            Some(map_float(
                x,
                float_of(d),
                |v| v * 0.5 * (1.0 + libm::erf(v / std::f64::consts::SQRT_2)),
                move |a, _| POLY_ULPS * ulp(c, 1.0 + a.abs()),
            ))
        }
        // A float bound lifts ints and bools to f32, as PyTorch.
        "clamp" => Some(exact_map(x, float_of(d), |v| {
            nan_or(v, |v| v.clamp(-1.0, 1.0))
        })),
        "mul_scalar" => Some(exact_map(x, float_of(d), |v| v * 2.0)),
        "to_f64" => cast(DType::F64),
        "to_f32" => cast(DType::F32),
        "to_f16" => cast(DType::F16),
        "to_bf16" => cast(DType::BF16),
        "to_i64" => cast(DType::I64),
        "to_i32" => cast(DType::I32),
        "to_u8" => cast(DType::U8),
        "to_bool" => cast(DType::Bool),
        "contiguous" => Some(x.exact()),
        // A 0-d tensor flattens to one element.
        "flatten" | "reshape_flat" => Some(x.reshape(vec![numel]).exact()),
        "unsqueeze" => Some(x.reshape([vec![1], x.shape.clone()].concat()).exact()),
        "squeeze_all" => Some(
            x.reshape(x.shape.iter().copied().filter(|&s| s != 1).collect())
                .exact(),
        ),
        "t" if rank > 2 => None,
        "t" if rank == 2 => x.transpose(0, 1).map(|t| t.exact()),
        "t" => Some(x.exact()),
        "narrow_first" => x.narrow(0, 0, 1).map(|t| t.exact()),
        "sum_all" => sums(vec![], vec![x.values.clone()], d, false),
        "mean_all" => sums(vec![], vec![x.values.clone()], d, true),
        "max_all" | "min_all" | "argmax_all" | "argmin_all" => {
            let index = name.starts_with("arg");
            extremes(
                vec![],
                vec![x.values.clone()],
                d,
                name.contains("max"),
                index,
            )
        }
        "sum_dim0" => {
            let (kept, f) = dim0(x);
            sums(kept, f, d, false)
        }
        "mean_dim0_keep" => {
            let (kept, f) = dim0(x);
            let keep = if rank == 0 {
                kept
            } else {
                [vec![1], kept].concat()
            };
            sums(keep, f, d, true)
        }
        "max_dim0" | "min_dim0" | "argmax_dim0" | "argmin_dim0" => {
            if rank > 0 && x.shape[0] == 0 {
                return None; // PyTorch: "Expected reduction dim 0 to have non-zero size".
            }
            let (kept, f) = dim0(x);
            extremes(kept, f, d, name.contains("max"), name.starts_with("arg"))
        }
        "softmax_last" => softmax(x, false),
        "log_softmax_last" => softmax(x, true),
        "gram" if rank == 2 => matmul(x, &x.transpose(0, 1)?),
        "gram" if rank == 1 => matmul(x, x),
        "gram" => None,
        "cat_self" if rank == 0 => None,
        "cat_self" => {
            let mut shape = x.shape.clone();
            shape[0] *= 2;
            Some(Want::exact(
                shape,
                d,
                [x.values.clone(), x.values.clone()].concat(),
            ))
        }
        "stack_self" => Some(Want::exact(
            [vec![2], x.shape.clone()].concat(),
            d,
            [x.values.clone(), x.values.clone()].concat(),
        )),
        "index_select_rev" if rank == 0 => Some(x.exact()),
        "index_select_rev" => {
            let n = x.shape[0];
            Some(
                x.gather(x.shape.clone(), |c| {
                    [vec![n - 1 - c[0]], c[1..].to_vec()].concat()
                })
                .exact(),
            )
        }
        _ => panic!("no reference for unary op {name}"),
    }
}

pub fn binary(name: &str, a: &Ref, b: &Ref) -> Option<Want> {
    let dtype = result_type(a, b);
    let c = compute(dtype);
    let exact = |_: f64| 0.0;
    let pick = |x: f64, y: f64, larger: bool| {
        if x.is_nan() || y.is_nan() {
            f64::NAN
        } else if larger {
            x.max(y)
        } else {
            x.min(y)
        }
    };
    match name {
        "add" => zip(a, b, dtype, dtype, |x, y| x + y, i64::wrapping_add, exact),
        "sub" if dtype == DType::Bool => None,
        "sub" => zip(a, b, dtype, dtype, |x, y| x - y, i64::wrapping_sub, exact),
        "mul" => zip(a, b, dtype, dtype, |x, y| x * y, i64::wrapping_mul, exact),
        // True division: integers are divided as f32.
        "div" => zip(
            a,
            b,
            float_of(dtype),
            float_of(dtype),
            |x, y| x / y,
            |_, _| unreachable!(),
            exact,
        ),
        "maximum" => zip(
            a,
            b,
            dtype,
            dtype,
            |x, y| pick(x, y, true),
            |x, y| x.max(y),
            exact,
        ),
        "minimum" => zip(
            a,
            b,
            dtype,
            dtype,
            |x, y| pick(x, y, false),
            |x, y| x.min(y),
            exact,
        ),
        "pow" if dtype == DType::Bool => None,
        // placelab refuses integers to negative integer powers, as PyTorch refuses a negative
        // Rust number; PyTorch gives 0 (or ±1) for a tensor exponent.
        "pow" if !dtype.is_float() && b.cast(dtype).values.iter().any(|e| e.f() < 0.0) => None,
        // pow goes through exp and log: its error grows with |y·ln x|.
        "pow" => zip(a, b, dtype, dtype, f64::powf, wrapping_pow, move |w| {
            POLY_ULPS * ulp(c, w)
        }),
        "eq" => zip(
            a,
            b,
            dtype,
            DType::Bool,
            |x, y| (x == y) as i64 as f64,
            |x, y| (x == y) as i64,
            exact,
        ),
        "lt" => zip(
            a,
            b,
            dtype,
            DType::Bool,
            |x, y| (x < y) as i64 as f64,
            |x, y| (x < y) as i64,
            exact,
        ),
        "matmul" => matmul(a, b),
        "cat" => {
            let dtype = promote(a.dtype, b.dtype);
            // PyTorch skips a 1-d empty operand whatever the other's shape (a legacy rule);
            // placelab refuses it with the shape error.
            let (a, b) = (a.cast(dtype), b.cast(dtype));
            if a.shape.is_empty() || a.shape.len() != b.shape.len() || a.shape[1..] != b.shape[1..]
            {
                return None;
            }
            let mut shape = a.shape.clone();
            shape[0] += b.shape[0];
            Some(Want::exact(shape, dtype, [a.values, b.values].concat()))
        }
        // `where(a > 0, a, b)`.
        "where_positive" => {
            let cond = a.cast(float_of(a.dtype));
            let shape = broadcast_shapes(&a.shape, &b.shape)?;
            let (cond, x, y) = (
                cond.broadcast(&shape)?,
                a.broadcast(&shape)?.cast(dtype),
                b.broadcast(&shape)?.cast(dtype),
            );
            let values = (0..cond.values.len()).map(|i| {
                if cond.values[i].f() > 0.0 {
                    x.values[i]
                } else {
                    y.values[i]
                }
            });
            Some(Want::exact(shape, dtype, values.collect()))
        }
        _ => panic!("no reference for binary op {name}"),
    }
}
