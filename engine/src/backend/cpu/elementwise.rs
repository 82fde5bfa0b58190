//! Element-wise arithmetic on host slices: binary ops, comparisons, unary math, clamp, where.
//! Inputs arrive already promoted to one dtype; f16/bf16 math is done in f32 by the caller.

use super::{map1, map2, map3};
use crate::base::dtype::Element;
use crate::base::op::{BinaryOp, CmpOp, UnaryOp};
use crate::device::layout::Layout;

/// The arithmetic every numeric element type supports. Integers wrap on overflow, as PyTorch's do.
pub trait Arith: Element {
    fn add(a: Self, b: Self) -> Self;
    fn sub(a: Self, b: Self) -> Self;
    fn mul(a: Self, b: Self) -> Self;
    fn div(a: Self, b: Self) -> Self;
    fn pow(a: Self, b: Self) -> Self;
    fn maximum(a: Self, b: Self) -> Self;
    fn minimum(a: Self, b: Self) -> Self;
    fn neg(a: Self) -> Self;
    fn abs(a: Self) -> Self;
    fn relu(a: Self) -> Self;
    /// ReLU's gradient `g` where ReLU's output `out` is above 0 (or NaN), else 0.
    fn relu_backward(g: Self, out: Self) -> Self;
}

macro_rules! arith_float {
    ($t:ty) => {
        impl Arith for $t {
            fn add(a: Self, b: Self) -> Self {
                a + b
            }
            fn sub(a: Self, b: Self) -> Self {
                a - b
            }
            fn mul(a: Self, b: Self) -> Self {
                a * b
            }
            fn div(a: Self, b: Self) -> Self {
                a / b
            }
            fn pow(a: Self, b: Self) -> Self {
                a.powf(b)
            }
            // NaN wins, as in torch.maximum.
            fn maximum(a: Self, b: Self) -> Self {
                if a.is_nan() || b.is_nan() {
                    <$t>::NAN
                } else {
                    a.max(b)
                }
            }
            fn minimum(a: Self, b: Self) -> Self {
                if a.is_nan() || b.is_nan() {
                    <$t>::NAN
                } else {
                    a.min(b)
                }
            }
            fn neg(a: Self) -> Self {
                -a
            }
            fn abs(a: Self) -> Self {
                a.abs()
            }
            fn relu(a: Self) -> Self {
                if a > 0.0 || a.is_nan() { a } else { 0.0 }
            }
            fn relu_backward(g: Self, out: Self) -> Self {
                if out <= 0.0 { 0.0 } else { g }
            }
        }
    };
}
arith_float!(f32);
arith_float!(f64);

macro_rules! arith_int {
    ($t:ty, $abs:expr) => {
        impl Arith for $t {
            fn add(a: Self, b: Self) -> Self {
                a.wrapping_add(b)
            }
            fn sub(a: Self, b: Self) -> Self {
                a.wrapping_sub(b)
            }
            fn mul(a: Self, b: Self) -> Self {
                a.wrapping_mul(b)
            }
            // Integer division never reaches a kernel (`div` is true division); this serves
            // floor-style helpers and guards zero.
            fn div(a: Self, b: Self) -> Self {
                if b == 0 { 0 } else { a.wrapping_div(b) }
            }
            // Square and multiply over the whole exponent (an i64 one may pass u32::MAX),
            // wrapping, as PyTorch's loop. Negative exponents are rejected before this runs.
            fn pow(a: Self, b: Self) -> Self {
                let (mut base, mut e, mut acc) = (a, b as u64, 1 as $t);
                while e > 0 {
                    if e & 1 == 1 {
                        acc = acc.wrapping_mul(base);
                    }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                acc
            }
            fn maximum(a: Self, b: Self) -> Self {
                a.max(b)
            }
            fn minimum(a: Self, b: Self) -> Self {
                a.min(b)
            }
            fn neg(a: Self) -> Self {
                (0 as $t).wrapping_sub(a)
            }
            fn abs(a: Self) -> Self {
                $abs(a)
            }
            fn relu(a: Self) -> Self {
                a.max(0)
            }
            fn relu_backward(g: Self, out: Self) -> Self {
                if out <= 0 { 0 } else { g }
            }
        }
    };
}
arith_int!(i64, |a: i64| a.wrapping_abs());
arith_int!(i32, |a: i32| a.wrapping_abs());
arith_int!(u8, |a: u8| a);

/// Bool arithmetic as PyTorch defines it: `+` is or, `*` is and.
impl Arith for bool {
    fn add(a: Self, b: Self) -> Self {
        a | b
    }
    fn sub(a: Self, b: Self) -> Self {
        a ^ b
    }
    fn mul(a: Self, b: Self) -> Self {
        a & b
    }
    fn div(a: Self, _b: Self) -> Self {
        a
    }
    fn pow(a: Self, b: Self) -> Self {
        a | !b
    }
    fn maximum(a: Self, b: Self) -> Self {
        a | b
    }
    fn minimum(a: Self, b: Self) -> Self {
        a & b
    }
    fn neg(a: Self) -> Self {
        a
    }
    fn abs(a: Self) -> Self {
        a
    }
    fn relu(a: Self) -> Self {
        a
    }
    fn relu_backward(g: Self, out: Self) -> Self {
        g & out
    }
}

/// Transcendental math for the float types kernels compute in.
pub trait FloatMath: Arith {
    fn exp(a: Self) -> Self;
    /// `e^a` for `a ≤ 0` or NaN (softmax's shifted inputs): the same values as `exp`, with
    /// the work for large inputs left out. `FMA`: the caller is compiled with fused
    /// multiply-add (`vectorized!`'s wide copies), so the polynomial may use it.
    fn exp_nonpositive<const FMA: bool>(a: Self) -> Self {
        Self::exp(a)
    }
    fn ln(a: Self) -> Self;
    fn sqrt(a: Self) -> Self;
    fn tanh(a: Self) -> Self;
    fn sigmoid(a: Self) -> Self;
    fn gelu(a: Self) -> Self;
    fn gelu_derivative(a: Self) -> Self;
}

/// `e^x` for f32 without a libm call, so loops over it vectorise: range reduction by ln 2 and
/// Cephes' degree-6 polynomial (within 2 ulp of `f32::exp` on normal results; results below
/// 2^-126 flush to 0). NaN stays NaN.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const HI: f32 = 88.722_83;
    const LO: f32 = -87.336_54;
    // NaN is carried through by the final select; the arithmetic works on a finite stand-in.
    let xc = if x.is_nan() { 0.0 } else { x.clamp(LO, HI) };
    let (e, k) = exp_reduced::<false>(xc);
    // SAFETY: `k` is a whole number in [-126, 128] (xc is finite and clamped).
    let ki: i32 = unsafe { k.to_int_unchecked() };
    // 2^k in two halves: k reaches 128 near the top of the range, past f32's largest exponent.
    let (k1, k2) = (ki >> 1, ki - (ki >> 1));
    let y =
        e * f32::from_bits(((k1 + 127) << 23) as u32) * f32::from_bits(((k2 + 127) << 23) as u32);
    if x.is_nan() {
        x
    } else if x > HI {
        f32::INFINITY
    } else if x < LO {
        0.0
    } else {
        y
    }
}

/// `a · b + c`, fused where the caller is compiled with FMA (elsewhere `mul_add` is a libm call).
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

/// `exp_f32`'s core for a finite, clamped `xc`: `(e, k)` with `e^xc = e · 2^k`, `k` whole.
#[inline(always)]
fn exp_reduced<const FMA: bool>(xc: f32) -> (f32, f32) {
    // Round to nearest through the float mantissa: exact for |xc·log2(e)| < 2^22.
    let k = (xc * std::f32::consts::LOG2_E + 12_582_912.0) - 12_582_912.0;
    let r = madd::<FMA>(k, -0.693_359_4, xc);
    let r = madd::<FMA>(k, 2.121_944_4e-4, r);
    let p = madd::<FMA>(1.987_569_1e-4, r, 1.398_199_9e-3);
    let p = madd::<FMA>(p, r, 8.333_452e-3);
    let p = madd::<FMA>(p, r, 4.166_579_6e-2);
    let p = madd::<FMA>(p, r, 1.666_666_5e-1);
    let p = madd::<FMA>(p, r, 0.5);
    (madd::<FMA>(p * r, r, r) + 1.0, k)
}

impl FloatMath for f32 {
    fn exp(a: f32) -> f32 {
        exp_f32(a)
    }
    #[inline(always)]
    fn exp_nonpositive<const FMA: bool>(x: f32) -> f32 {
        // `exp_f32` for x ≤ 0: 2^k fits one exponent field (k ≥ -126), and nothing overflows.
        const LO: f32 = -87.336_54;
        // Clamped to [LO, 0] whatever the input, so the conversion below is always defined.
        let xc = if x.is_nan() { 0.0 } else { x.clamp(LO, 0.0) };
        let (e, k) = exp_reduced::<FMA>(xc);
        // SAFETY: `k` is a whole number in [-126, 0] (xc is finite, in [LO, 0]).
        let ki: i32 = unsafe { k.to_int_unchecked() };
        let y = e * f32::from_bits(((ki + 127) << 23) as u32);
        if x < LO {
            0.0
        } else if x.is_nan() {
            x
        } else {
            y
        }
    }
    fn ln(a: f32) -> f32 {
        a.ln()
    }
    fn sqrt(a: f32) -> f32 {
        a.sqrt()
    }
    fn tanh(a: f32) -> f32 {
        a.tanh()
    }
    fn sigmoid(a: f32) -> f32 {
        1.0 / (1.0 + exp_f32(-a))
    }
    // The exact (erf) form, PyTorch's default.
    fn gelu(a: f32) -> f32 {
        0.5 * a * (1.0 + libm::erff(a * std::f32::consts::FRAC_1_SQRT_2))
    }
    fn gelu_derivative(a: f32) -> f32 {
        f64::gelu_derivative(a as f64) as f32
    }
}

impl FloatMath for f64 {
    fn exp(a: f64) -> f64 {
        a.exp()
    }
    fn ln(a: f64) -> f64 {
        a.ln()
    }
    fn sqrt(a: f64) -> f64 {
        a.sqrt()
    }
    fn tanh(a: f64) -> f64 {
        a.tanh()
    }
    fn sigmoid(a: f64) -> f64 {
        1.0 / (1.0 + (-a).exp())
    }
    fn gelu(a: f64) -> f64 {
        0.5 * a * (1.0 + libm::erf(a * std::f64::consts::FRAC_1_SQRT_2))
    }
    // Φ(x) + x·φ(x).
    fn gelu_derivative(a: f64) -> f64 {
        let cdf = 0.5 * (1.0 + libm::erf(a * std::f64::consts::FRAC_1_SQRT_2));
        let pdf = (-0.5 * a * a).exp() / (2.0 * std::f64::consts::PI).sqrt();
        cdf + a * pdf
    }
}

pub fn binary<T: Arith>(op: BinaryOp, a: &[T], la: &Layout, b: &[T], lb: &Layout, out: &mut [T]) {
    match op {
        BinaryOp::Add => map2(a, la, b, lb, out, T::add),
        BinaryOp::Sub => map2(a, la, b, lb, out, T::sub),
        BinaryOp::Mul => map2(a, la, b, lb, out, T::mul),
        BinaryOp::Div => map2(a, la, b, lb, out, T::div),
        BinaryOp::Pow => map2(a, la, b, lb, out, T::pow),
        BinaryOp::Maximum => map2(a, la, b, lb, out, T::maximum),
        BinaryOp::Minimum => map2(a, la, b, lb, out, T::minimum),
        BinaryOp::ReluBackward => map2(a, la, b, lb, out, T::relu_backward),
    }
}

pub fn compare<T: Element>(
    op: CmpOp,
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    out: &mut [bool],
) {
    match op {
        CmpOp::Eq => map2(a, la, b, lb, out, |x, y| x == y),
        CmpOp::Ne => map2(a, la, b, lb, out, |x, y| x != y),
        CmpOp::Lt => map2(a, la, b, lb, out, |x, y| x < y),
        CmpOp::Le => map2(a, la, b, lb, out, |x, y| x <= y),
        CmpOp::Gt => map2(a, la, b, lb, out, |x, y| x > y),
        CmpOp::Ge => map2(a, la, b, lb, out, |x, y| x >= y),
    }
}

/// Ops that keep the dtype (neg, abs, relu) for any numeric type.
pub fn unary_arith<T: Arith>(op: UnaryOp, a: &[T], la: &Layout, out: &mut [T]) {
    match op {
        UnaryOp::Neg => map1(a, la, out, T::neg),
        UnaryOp::Abs => map1(a, la, out, T::abs),
        UnaryOp::Relu => map1(a, la, out, T::relu),
        _ => unreachable!("{} needs a float kernel", op.name()),
    }
}

pub fn unary_float<T: FloatMath>(op: UnaryOp, a: &[T], la: &Layout, out: &mut [T]) {
    match op {
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => unary_arith(op, a, la, out),
        UnaryOp::Exp => map1(a, la, out, T::exp),
        UnaryOp::Log => map1(a, la, out, T::ln),
        UnaryOp::Sqrt => map1(a, la, out, T::sqrt),
        UnaryOp::Sigmoid => map1(a, la, out, T::sigmoid),
        UnaryOp::Tanh => map1(a, la, out, T::tanh),
        UnaryOp::Gelu => map1(a, la, out, T::gelu),
        UnaryOp::GeluDerivative => map1(a, la, out, T::gelu_derivative),
    }
}

/// `dst[i] += alpha · src[i]` (an optimizer's update, in place): the product rounded to `T`,
/// then the sum, as `dst + alpha·src` computed out of place would be.
pub fn add_scaled<T: Arith>(dst: &mut [T], src: &[T], alpha: T) {
    super::chunked(dst, 1, |start, d| {
        super::simd::wide(|| {
            for (d, &s) in d.iter_mut().zip(&src[start..]) {
                *d = T::add(*d, T::mul(alpha, s));
            }
        })
    });
}

/// `min(max(x, lo), hi)`; NaN stays NaN.
pub fn clamp<T: Arith>(a: &[T], la: &Layout, lo: Option<T>, hi: Option<T>, out: &mut [T]) {
    map1(a, la, out, |x| {
        let x = match lo {
            Some(l) if x < l => l,
            _ => x,
        };
        match hi {
            Some(h) if x > h => h,
            _ => x,
        }
    });
}

pub fn where_<T: Element>(
    c: (&[bool], &Layout),
    a: (&[T], &Layout),
    b: (&[T], &Layout),
    out: &mut [T],
) {
    map3(c, a, b, out, |c, x, y| if c { x } else { y });
}

#[cfg(test)]
mod tests {
    use super::super::simd::{for_each_width, wide_at};
    use super::super::zip_map_at;
    use super::{FloatMath, exp_f32};

    /// `exp_f32`'s range: below `LO` the result would be subnormal and is 0, above `HI` it is ∞.
    const LO: f32 = -87.336_54;
    const HI: f32 = 88.722_83;

    /// A sweep of the range, its edges, the values where the reduction's rounding to a whole
    /// multiple of ln 2 is a tie, and the special values.
    fn exp_inputs() -> Vec<f32> {
        let mut x: Vec<f32> = (0..200_000)
            .map(|i| -100.0 + i as f32 * 0.001_013)
            .collect();
        x.extend((-127..128).map(|k| (k as f32 + 0.5) * std::f32::consts::LN_2));
        for edge in [LO, HI, 0.0] {
            x.extend([edge.next_down(), edge, edge.next_up()]);
        }
        x.extend([
            -0.0,
            f32::from_bits(1), // subnormal inputs: e^x = 1
            -f32::from_bits(0x007f_ffff),
            f32::MIN_POSITIVE,
            f32::EPSILON,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
        ]);
        x
    }

    /// `e^x` for f32, rounded from f64; 0 where `exp_f32` documents that it flushes to zero.
    fn exp_reference(x: f32) -> f32 {
        if x < LO { 0.0 } else { (x as f64).exp() as f32 }
    }

    /// Checks `got[i] ≈ e^x[i]`: within `ulp` of the reference, exact at the edges (1 at 0,
    /// 0 below the range, ∞ above it), NaN for NaN. Returns the worst error in ulp.
    fn within_ulp(x: &[f32], got: &[f32], ulp: u32, what: &str) -> u32 {
        let mut worst = 0;
        for (&x, &g) in x.iter().zip(got) {
            let want = exp_reference(x);
            let ok = if x.is_nan() {
                g.is_nan()
            } else if want == 0.0 || want.is_infinite() || x == 0.0 {
                g == want
            } else {
                let err = g.to_bits().abs_diff(want.to_bits());
                worst = worst.max(err);
                g.is_sign_positive() && err <= ulp
            };
            assert!(ok, "{what}: e^{x:?} gave {g:?}, want {want:?}");
        }
        worst
    }

    #[test]
    fn fast_exp_is_within_two_ulp_in_every_copy() {
        let x = exp_inputs();
        let scalar: Vec<f32> = x.iter().map(|&x| exp_f32(x)).collect();
        let worst = within_ulp(&x, &scalar, 2, "scalar");
        println!("scalar exp_f32: worst error {worst} ulp");
        // Each copy of the kernel `unary(Exp)` runs (`map1`'s loop), over all the inputs and
        // over short lengths that end in a partial vector. It uses no fused multiply-add, so
        // every copy gives the scalar function's bits exactly.
        for_each_width(|w| {
            for len in (0..=40).chain([x.len()]) {
                let mut got = vec![0.0f32; len];
                zip_map_at(w, &x[..len], &x[..len], &mut got, &|x, _| {
                    <f32 as FloatMath>::exp(x) // as `unary_float` calls it (not std's `f32::exp`)
                });
                for (i, g) in got.iter().enumerate() {
                    let want = scalar[i];
                    assert!(
                        g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                        "{w}-bit copy, length {len}: e^{:?} gave {g:?}, the scalar {want:?}",
                        x[i]
                    );
                }
            }
        });
    }

    #[test]
    fn softmax_exps_are_within_two_ulp_plain_and_fused_in_every_copy() {
        // The inputs softmax gives it: x ≤ 0, and NaN.
        let nonpositive = |x: &f32| *x <= 0.0 || x.is_nan();
        let x: Vec<f32> = exp_inputs().into_iter().filter(nonpositive).collect();
        for fused in [f32::exp_nonpositive::<false>, f32::exp_nonpositive::<true>] {
            let got: Vec<f32> = x.iter().map(|&x| fused(x)).collect();
            within_ulp(&x, &got, 2, "scalar");
        }
        // As `softmax_block`'s copies call it: fused multiply-add in the wide ones.
        for_each_width(|w| {
            for len in (0..=40).chain([x.len()]) {
                let mut got = vec![0.0f32; len];
                wide_at(w, || {
                    for (o, &x) in got.iter_mut().zip(&x[..len]) {
                        *o = if w > 128 {
                            f32::exp_nonpositive::<true>(x)
                        } else {
                            f32::exp_nonpositive::<false>(x)
                        };
                    }
                });
                let worst = within_ulp(&x[..len], &got, 2, &format!("{w}-bit copy"));
                if len == x.len() {
                    println!("{w}-bit copy: worst error {worst} ulp");
                }
            }
        });
    }
}

/// The values of an `arange`: `start + i · step` from integers, exact for every i64 (f64 steps
/// would round above 2⁵³), as in PyTorch; or from floats, in f64.
#[derive(Debug, Clone, Copy)]
pub enum Steps {
    Int(i64, i64),
    Float(f64, f64),
}

/// Writes `out[i] = start + i · step`.
pub fn arange<T: Element>(out: &mut [T], steps: Steps) {
    for (i, v) in out.iter_mut().enumerate() {
        *v = match steps {
            Steps::Int(a, s) => T::from_i64(a.wrapping_add((i as i64).wrapping_mul(s))),
            Steps::Float(a, s) => T::from_f64(a + i as f64 * s),
        };
    }
}
