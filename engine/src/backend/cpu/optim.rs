//! The optimizers' in-place updates on host memory: each element computed in `A` (f32 for the
//! half types, as PyTorch's opmath) in the order of `kernels/optim.cu`, which is the order of
//! the out-of-place ops each product and sum rounded to `A`: on f32 and f64 a fused step gives
//! the unfused ops' bits.

use std::ops::{Add, Div, Mul, Sub};

use super::{SendPtr, chunked};
use crate::base::op::Update;

/// The type an update computes in.
pub trait Accumulator:
    Copy
    + Send
    + Sync
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
{
    fn of(x: f64) -> Self;
    fn sqrt(self) -> Self;
}
impl Accumulator for f32 {
    fn of(x: f64) -> f32 {
        x as f32
    }
    fn sqrt(self) -> f32 {
        f32::sqrt(self)
    }
}
impl Accumulator for f64 {
    fn of(x: f64) -> f64 {
        x
    }
    fn sqrt(self) -> f64 {
        f64::sqrt(self)
    }
}

/// One parameter's update in place: `param` and `grad` of equal length, and one state slice
/// per `update.state_count()`, each as long, uninitialised when `first`.
/// `load` and `store` convert to and from `A` (generic, not `fn` pointers, so that the loops
/// inline and vectorise them).
pub fn step<T, A, L, S>(
    update: &Update,
    param: &mut [T],
    grad: &[T],
    state: [Option<&mut [T]>; 2],
    first: bool,
    (load, store): (L, S),
) where
    T: Copy + Send + Sync,
    A: Accumulator,
    L: Fn(T) -> A + Copy + Sync,
    S: Fn(A) -> T + Copy + Sync,
{
    assert_eq!(
        param.len(),
        grad.len(),
        "an update's gradient has the parameter's length"
    );
    let [s0, s1] = state.map(|s| {
        s.map(|s| {
            assert_eq!(
                s.len(),
                param.len(),
                "an update's state has the parameter's length"
            );
            SendPtr(s.as_mut_ptr())
        })
    });
    match *update {
        Update::Sgd {
            lr,
            momentum,
            dampening,
            weight_decay,
            nesterov,
        } => {
            let hyper = (lr, momentum, dampening, weight_decay, nesterov);
            sgd(hyper, param, grad, s0, first, (load, store));
        }
        Update::Adam {
            lr,
            betas,
            eps,
            weight_decay,
            decoupled,
            corrections,
        } => {
            let (Some(mp), Some(vp)) = (s0, s1) else {
                panic!("Adam's update needs its two moments")
            };
            let hyper = (lr, betas, eps, weight_decay, decoupled, corrections);
            adam(hyper, param, grad, (mp, vp), first, (load, store));
        }
    }
}

/// SGD's update (`Update::Sgd`'s lr, momentum, dampening, weight decay and nesterov), with the
/// momentum buffer `momentum_buffer` when there is momentum.
fn sgd<T, A, L, S>(
    (lr, momentum, dampening, weight_decay, nesterov): (f64, f64, f64, f64, bool),
    param: &mut [T],
    grad: &[T],
    momentum_buffer: Option<SendPtr<T>>,
    first: bool,
    (load, store): (L, S),
) where
    T: Copy + Send + Sync,
    A: Accumulator,
    L: Fn(T) -> A + Copy + Sync,
    S: Fn(A) -> T + Copy + Sync,
{
    let of = A::of;
    let (wd, m, keep, step) = (of(weight_decay), of(momentum), of(1.0 - dampening), of(-lr));
    chunked(param, 1, |start, p| {
        let g = &grad[start..start + p.len()];
        let Some(buf) = momentum_buffer else {
            // No momentum: one loop, without branches, vectorised.
            super::simd::wide(|| {
                for (p, &g) in p.iter_mut().zip(g) {
                    let w = load(*p);
                    let d = if weight_decay != 0.0 {
                        load(g) + w * wd
                    } else {
                        load(g)
                    };
                    *p = store(w + d * step);
                }
            });
            return;
        };
        // SAFETY: each chunk reads and writes its own range of the state.
        let buf = unsafe { std::slice::from_raw_parts_mut(buf.0.add(start), p.len()) };
        super::simd::wide(|| {
            for ((p, &g), b) in p.iter_mut().zip(g).zip(buf.iter_mut()) {
                let w = load(*p);
                let mut d = load(g);
                if weight_decay != 0.0 {
                    d = d + w * wd;
                }
                let nb = if first { d } else { load(*b) * m + d * keep };
                *b = store(nb);
                d = if nesterov { d + nb * m } else { nb };
                *p = store(w + d * step);
            }
        });
    });
}

/// Adam's update (`Update::Adam`'s lr, betas, eps, weight decay, decoupled and bias
/// corrections), with its two moments.
#[allow(clippy::type_complexity)]
fn adam<T, A, L, S>(
    (lr, (b1, b2), eps, weight_decay, decoupled, (c1, c2)): (
        f64,
        (f64, f64),
        f64,
        f64,
        bool,
        (f64, f64),
    ),
    param: &mut [T],
    grad: &[T],
    (mp, vp): (SendPtr<T>, SendPtr<T>),
    first: bool,
    (load, store): (L, S),
) where
    T: Copy + Send + Sync,
    A: Accumulator,
    L: Fn(T) -> A + Copy + Sync,
    S: Fn(A) -> T + Copy + Sync,
{
    let of = A::of;
    let (ab1, a1b1, ab2, a1b2) = (of(b1), of(1.0 - b1), of(b2), of(1.0 - b2));
    let (aeps, alr, ac1, ac2) = (of(eps), of(lr), of(c1), of(c2));
    let (wd, shrink) = (of(weight_decay), of(1.0 - lr * weight_decay));
    chunked(param, 1, |start, p| {
        let (mp, vp) = (mp, vp); // the pointers whole (they are `Sync`), not their fields
        let g = &grad[start..start + p.len()];
        // SAFETY: each chunk reads and writes its own range of the moments.
        let (ms, vs) = unsafe {
            (
                std::slice::from_raw_parts_mut(mp.0.add(start), p.len()),
                std::slice::from_raw_parts_mut(vp.0.add(start), p.len()),
            )
        };
        super::simd::wide(|| {
            for i in 0..p.len() {
                let w = load(p[i]);
                let mut gi = load(g[i]);
                let mut kept = w;
                if weight_decay != 0.0 {
                    if decoupled {
                        kept = w * shrink;
                    } else {
                        gi = gi + w * wd;
                    }
                }
                let (m0, v0) = if first {
                    (of(0.0), of(0.0))
                } else {
                    (load(ms[i]), load(vs[i]))
                };
                let m = m0 * ab1 + gi * a1b1;
                let v = v0 * ab2 + (gi * gi) * a1b2;
                ms[i] = store(m);
                vs[i] = store(v);
                let denom = (v / ac2).sqrt() + aeps;
                p[i] = store(kept - (m / ac1) / denom * alr);
            }
        });
    });
}
