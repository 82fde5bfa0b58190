//! The property test's reference: tensors as plain row-major `Vec`s, built from the generated
//! numbers, with views and ops written here as index arithmetic and f64 (or wrapping i64)
//! loops. Nothing here calls the engine, so a stride or kernel bug cannot hit both sides.
//!
//! The dtype rules are PyTorch's (checked against torch 2.15 on the CPU); where placelab
//! deliberately differs, `ops.rs` says so at the op.

use half::{bf16, f16};
use placelab::DType;

/// One element: floats as f64 (every f16/bf16/f32 value is exact there), integers and bools as
/// i64 (exact, so wrapping is checked).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    F(f64),
    I(i64),
}

impl Num {
    pub fn f(self) -> f64 {
        match self {
            Num::F(x) => x,
            Num::I(i) => i as f64,
        }
    }
    fn i(self) -> i64 {
        match self {
            // Float to integer truncates toward zero and saturates (NaN is 0), as Rust's `as`;
            // PyTorch leaves out-of-range conversions undefined.
            Num::F(x) => x as i64,
            Num::I(i) => i,
        }
    }
}

/// A value of `dtype` made from `x`: PyTorch's conversion, with one rounding for floats.
pub fn to_dtype(x: Num, dtype: DType) -> Num {
    match (dtype, x) {
        (DType::F64, _) => Num::F(x.f()),
        (DType::F32, _) => Num::F(x.f() as f32 as f64),
        // Through f32, as PyTorch's c10::Half and c10::BFloat16 take a float (and half's own
        // f64 conversions drop the low bits before rounding, which misrounds near ties).
        (DType::F16, _) => Num::F(f16::from_f32(x.f() as f32).to_f64()),
        (DType::BF16, _) => Num::F(bf16::from_f32(x.f() as f32).to_f64()),
        // NaN is true, as in PyTorch.
        (DType::Bool, _) => Num::I((x.f() != 0.0) as i64),
        // Between integers, a conversion wraps.
        (DType::I64, _) => Num::I(x.i()),
        (DType::I32, Num::F(f)) => Num::I(f as i32 as i64),
        (DType::I32, Num::I(i)) => Num::I(i as i32 as i64),
        (DType::U8, Num::F(f)) => Num::I(f as u8 as i64),
        (DType::U8, Num::I(i)) => Num::I(i as u8 as i64),
    }
}

/// The f32 or f64 that `dtype` computes in (halves in f32, as PyTorch's "opmath").
pub fn compute(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// The spacing of `dtype`'s numbers near `x` (its epsilon times `|x|`, with the smallest normal
/// number as the floor): the unit the tolerances below are stated in.
pub fn ulp(dtype: DType, x: f64) -> f64 {
    let (eps, tiny) = match dtype {
        DType::F64 => (f64::EPSILON, f64::MIN_POSITIVE),
        DType::F32 => (f32::EPSILON as f64, f32::MIN_POSITIVE as f64),
        DType::F16 => (2f64.powi(-10), 2f64.powi(-14)),
        DType::BF16 => (2f64.powi(-7), f32::MIN_POSITIVE as f64),
        _ => (0.0, 0.0),
    };
    eps * x.abs().max(tiny)
}

/// The tolerance of an element whose value the reference cannot pin down.
pub const ANYTHING: f64 = f64::INFINITY;

/// A reference tensor and, per element, how far the engine may be from it (0: exactly).
#[derive(Debug, Clone)]
pub struct Want {
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub values: Vec<Num>,
    pub tol: Vec<f64>,
}

impl Want {
    pub fn exact(shape: Vec<usize>, dtype: DType, values: Vec<Num>) -> Want {
        let tol = vec![0.0; values.len()];
        Want {
            shape,
            dtype,
            values,
            tol,
        }
    }

    /// Whether `got` (read natively from the engine) matches: NaN with NaN, an infinity with the
    /// same infinity, integers exactly, finite floats within the tolerance.
    pub fn check(&self, shape: &[usize], dtype: DType, got: &[Num]) -> Result<(), String> {
        if shape != self.shape || dtype != self.dtype || got.len() != self.values.len() {
            return Err(format!(
                "gave {dtype} {shape:?}, the reference {} {:?}",
                self.dtype, self.shape
            ));
        }
        for (i, (g, w)) in got.iter().zip(&self.values).enumerate() {
            let ok = match (g, w) {
                _ if self.tol[i] == ANYTHING => true,
                (Num::I(g), Num::I(w)) => g == w,
                (Num::F(g), Num::F(w)) if w.is_nan() => g.is_nan(),
                (Num::F(g), Num::F(w)) if w.is_infinite() => g == w,
                (Num::F(g), Num::F(w)) => g.is_finite() && (g - w).abs() <= self.tol[i],
                _ => false,
            };
            if !ok {
                return Err(format!(
                    "[{i}] = {g:?}, the reference {w:?} (±{})",
                    self.tol[i]
                ));
            }
        }
        Ok(())
    }
}

/// A reference tensor: shape, dtype and row-major values.
#[derive(Debug, Clone)]
pub struct Ref {
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub values: Vec<Num>,
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * shape[k + 1];
    }
    s
}

/// The coordinates of row-major position `at` in `shape`.
fn coords(shape: &[usize], at: usize) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    let mut rem = at;
    for k in (0..shape.len()).rev() {
        c[k] = rem % shape[k];
        rem /= shape[k];
    }
    c
}

impl Ref {
    pub fn new(values: &[f64], shape: &[usize], dtype: DType) -> Ref {
        let values = values.iter().map(|&v| to_dtype(Num::F(v), dtype)).collect();
        Ref {
            shape: shape.to_vec(),
            dtype,
            values,
        }
    }

    fn at(&self, c: &[usize]) -> Num {
        let at: usize = c.iter().zip(strides(&self.shape)).map(|(c, s)| c * s).sum();
        self.values[at]
    }

    /// A tensor of `shape` whose element at coordinates `c` is this one's at `source(c)`.
    pub fn gather(&self, shape: Vec<usize>, source: impl Fn(&[usize]) -> Vec<usize>) -> Ref {
        let n = shape.iter().product();
        let values = (0..n)
            .map(|i| self.at(&source(&coords(&shape, i))))
            .collect();
        Ref {
            shape,
            dtype: self.dtype,
            values,
        }
    }

    pub fn reshape(&self, shape: Vec<usize>) -> Ref {
        Ref {
            shape,
            ..self.clone()
        }
    }

    pub fn cast(&self, dtype: DType) -> Ref {
        let values = self.values.iter().map(|&v| to_dtype(v, dtype)).collect();
        Ref {
            shape: self.shape.clone(),
            dtype,
            values,
        }
    }

    pub fn exact(&self) -> Want {
        Want::exact(self.shape.clone(), self.dtype, self.values.clone())
    }

    /// Dimensions `a` and `b` swapped; a 0-d tensor takes 0 (or -1) for both, as PyTorch.
    pub fn transpose(&self, a: usize, b: usize) -> Option<Ref> {
        let rank = self.shape.len();
        if rank == 0 {
            return (a == 0 && b == 0).then(|| self.clone());
        }
        let (a, b) = (a % rank, b % rank);
        let mut shape = self.shape.clone();
        shape.swap(a, b);
        Some(self.gather(shape, |c| {
            let mut c = c.to_vec();
            c.swap(a, b);
            c
        }))
    }

    pub fn reversed_dims(&self) -> Ref {
        let shape = self.shape.iter().rev().copied().collect();
        self.gather(shape, |c| c.iter().rev().copied().collect())
    }

    /// Elements `start..start + len` of dimension `dim`; None where PyTorch refuses.
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Option<Ref> {
        if dim >= self.shape.len() || start + len > self.shape[dim] {
            return None;
        }
        let mut shape = self.shape.clone();
        shape[dim] = len;
        Some(self.gather(shape, |c| {
            let mut c = c.to_vec();
            c[dim] += start;
            c
        }))
    }

    /// Broadcast to `shape` (this shape's dimensions aligned to its end; size 1 stretches).
    pub fn broadcast(&self, shape: &[usize]) -> Option<Ref> {
        let lead = shape.len().checked_sub(self.shape.len())?;
        let fits = self
            .shape
            .iter()
            .zip(&shape[lead..])
            .all(|(&d, &o)| d == o || d == 1);
        fits.then(|| {
            self.gather(shape.to_vec(), |c| {
                let own = &c[lead..];
                own.iter()
                    .zip(&self.shape)
                    .map(|(&i, &d)| if d == 1 { 0 } else { i })
                    .collect()
            })
        })
    }

    /// Row `r` of dimension `dim`'s fibres: the elements that a reduction over `dim` combines,
    /// for each output position (the shape without `dim`).
    pub fn fibres(&self, dim: usize) -> (Vec<usize>, Vec<Vec<Num>>) {
        let mut kept = self.shape.clone();
        let len = kept.remove(dim);
        let n: usize = kept.iter().product();
        let fibres = (0..n)
            .map(|i| {
                let c = coords(&kept, i);
                (0..len)
                    .map(|j| {
                        let mut full = c.clone();
                        full.insert(dim, j);
                        self.at(&full)
                    })
                    .collect()
            })
            .collect();
        (kept, fibres)
    }
}

/// NumPy's broadcasting of two shapes, written out here to check the engine's.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let size = |s: &[usize], i: usize| {
        if i + s.len() >= n {
            s[i + s.len() - n]
        } else {
            1
        }
    };
    (0..n)
        .map(|i| match (size(a, i), size(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

fn category(d: DType) -> u8 {
    match d {
        DType::Bool => 0,
        d if d.is_float() => 2,
        _ => 1,
    }
}

fn rank_of(d: DType) -> u8 {
    match d {
        DType::Bool => 0,
        DType::U8 => 1,
        DType::I32 => 2,
        DType::I64 => 3,
        DType::F16 | DType::BF16 => 4,
        DType::F32 => 5,
        DType::F64 => 6,
    }
}

/// PyTorch's promotion of two tensor dtypes (f16 with bf16 meet at f32).
pub fn promote(a: DType, b: DType) -> DType {
    match (a, b) {
        _ if a == b => a,
        (DType::F16, DType::BF16) | (DType::BF16, DType::F16) => DType::F32,
        _ if rank_of(a) >= rank_of(b) => a,
        _ => b,
    }
}

/// PyTorch's `result_type` of two tensors: a 0-d tensor does not widen a tensor with
/// dimensions within its category, only lifts it to a higher category.
pub fn result_type(a: &Ref, b: &Ref) -> DType {
    let (za, zb) = (a.shape.is_empty(), b.shape.is_empty());
    if za == zb {
        return promote(a.dtype, b.dtype);
    }
    let (dim, zero) = if za {
        (b.dtype, a.dtype)
    } else {
        (a.dtype, b.dtype)
    };
    if category(zero) > category(dim) {
        promote(dim, zero)
    } else {
        dim
    }
}

/// The float dtype an op that needs floats gives for `d` (ints and bool become f32).
pub fn float_of(d: DType) -> DType {
    if d.is_float() { d } else { DType::F32 }
}

/// An op that is not exact in f32 (`tol` > 0) gives a half result one more unit off: the
/// engine rounds its f32 result to the half once more. An exact op stays exact: f32 has more
/// than twice a half's bits, so rounding the exact result through f32 changes nothing.
fn with_half_rounding(tol: f64, dtype: DType, exact: f64) -> f64 {
    if tol > 0.0 && dtype.is_float() && compute(dtype) != dtype {
        tol + ulp(dtype, exact)
    } else {
        tol
    }
}

/// Elementwise `f` over `x` into `dtype`, the inputs first converted to `dtype`'s compute type,
/// the result rounded once to `dtype`; `tol(x, y)` is the allowed error before that rounding.
pub fn map_float(
    x: &Ref,
    dtype: DType,
    f: impl Fn(f64) -> f64,
    tol: impl Fn(f64, f64) -> f64,
) -> Want {
    let c = compute(dtype);
    let mut values = Vec::new();
    let mut tols = Vec::new();
    for v in &x.values {
        let a = to_dtype(to_dtype(*v, dtype), c).f();
        let exact = f(a);
        let y = to_dtype(Num::F(exact), dtype);
        tols.push(with_half_rounding(tol(a, exact), dtype, exact));
        values.push(y);
    }
    Want {
        shape: x.shape.clone(),
        dtype,
        values,
        tol: tols,
    }
}

/// Elementwise `f` over the broadcast `a` and `b` in `dtype` (operands converted to it first,
/// as PyTorch computes in the result type); `f` sees f64s, `g` wrapping i64s.
pub fn zip(
    a: &Ref,
    b: &Ref,
    dtype: DType,
    out: DType,
    f: impl Fn(f64, f64) -> f64,
    g: impl Fn(i64, i64) -> i64,
    tol: impl Fn(f64) -> f64,
) -> Option<Want> {
    let shape = broadcast_shapes(&a.shape, &b.shape)?;
    let (a, b) = (
        a.broadcast(&shape)?.cast(dtype),
        b.broadcast(&shape)?.cast(dtype),
    );
    let mut values = Vec::new();
    let mut tols = Vec::new();
    for (x, y) in a.values.iter().zip(&b.values) {
        let (v, t) = match (x, y) {
            (Num::I(x), Num::I(y)) => (Num::I(g(*x, *y)), 0.0),
            _ => {
                let exact = f(x.f(), y.f());
                (Num::F(exact), with_half_rounding(tol(exact), out, exact))
            }
        };
        values.push(to_dtype(v, out));
        tols.push(t);
    }
    Some(Want {
        shape,
        dtype: out,
        values,
        tol: tols,
    })
}

/// `x` to the power `n` with wrapping, by squaring (the exponent may be huge).
pub fn wrapping_pow(mut x: i64, mut n: i64) -> i64 {
    let mut acc = 1i64;
    while n > 0 {
        if n & 1 == 1 {
            acc = acc.wrapping_mul(x);
        }
        x = x.wrapping_mul(x);
        n >>= 1;
    }
    acc
}

/// The first index of the largest (`largest`) or smallest value, a NaN counting as beyond
/// every number; None for an empty fibre.
pub fn arg_extreme(fibre: &[Num], largest: bool) -> Option<usize> {
    let nan = |v: Num| matches!(v, Num::F(x) if x.is_nan());
    let beats = |v: Num, best: Num| match (v, best) {
        (Num::I(x), Num::I(y)) => {
            if largest {
                x > y
            } else {
                x < y
            }
        }
        _ => {
            if largest {
                v.f() > best.f()
            } else {
                v.f() < best.f()
            }
        }
    };
    let mut best: Option<usize> = None;
    for (i, &v) in fibre.iter().enumerate() {
        match best {
            Some(b) if nan(fibre[b]) => break,
            Some(b) if !nan(v) && !beats(v, fibre[b]) => {}
            _ => best = Some(i),
        }
    }
    best
}

/// The product of `a` (m×k) and `b` (k×n) in `dtype`: wrapping for integers; for floats f64
/// sums, within `units` of the compute type's epsilon times the sum of the terms' magnitudes
/// (the engine adds in another order, in f32 for f32 and halves) and one unit of a half result.
pub fn product(
    a: &[Num],
    b: &[Num],
    (m, k, n): (usize, usize, usize),
    dtype: DType,
    units: f64,
) -> (Vec<Num>, Vec<f64>) {
    let mut values = Vec::with_capacity(m * n);
    let mut tols = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let (x, y) = (|p: usize| a[i * k + p], |p: usize| b[p * n + j]);
            if !dtype.is_float() {
                let s = (0..k).fold(0i64, |s, p| s.wrapping_add(x(p).i().wrapping_mul(y(p).i())));
                values.push(to_dtype(Num::I(s), dtype));
                tols.push(0.0);
                continue;
            }
            let s: f64 = (0..k).map(|p| x(p).f() * y(p).f()).sum();
            let mag: f64 = (0..k).map(|p| (x(p).f() * y(p).f()).abs()).sum();
            values.push(to_dtype(Num::F(s), dtype));
            // A term past the compute type's range makes the order of the sums decide
            // between ±inf and NaN: anything goes there.
            let overflows = !to_dtype(Num::F(mag), compute(dtype)).f().is_finite();
            tols.push(if overflows {
                ANYTHING
            } else {
                units * ulp(compute(dtype), mag) + ulp(dtype, s)
            });
        }
    }
    (values, tols)
}
