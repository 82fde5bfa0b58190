//! Layer normalization over rows (`torch.nn.functional.layer_norm`): each row of `len` values
//! has its mean and variance taken, in f64 (as `kernels/reduce.cu`'s `layer_norm_rows`), and is
//! scaled to mean 0 and variance 1, then by the optional weight and bias of `len` values.

use super::elementwise::Arith;
use super::{SendPtr, chunked};

/// The weight and bias of a layer norm, each `len` values, either absent.
pub type Affine<'a, T> = (Option<&'a [T]>, Option<&'a [T]>);

/// `out = (x − mean) · rstd · weight + bias` per row of `len`, with each row's `mean` and
/// `rstd = 1/√(var + eps)` (the biased variance, as PyTorch's) written for the backward pass.
pub fn layer_norm_rows<T: Arith>(
    x: &[T],
    len: usize,
    eps: f64,
    (weight, bias): Affine<T>,
    out: &mut [T],
    (mean, rstd): (&mut [T], &mut [T]),
) {
    if len == 0 {
        return;
    }
    let (means, rstds) = (SendPtr(mean.as_mut_ptr()), SendPtr(rstd.as_mut_ptr()));
    chunked(out, len, |start, o| {
        let rows = x[start..start + o.len()].chunks(len).zip(o.chunks_mut(len));
        for (i, (row, orow)) in rows.enumerate() {
            let (m, r) = moments(row, eps);
            let (mt, rt) = (T::from_f64(m), T::from_f64(r));
            for (j, (o, &v)) in orow.iter_mut().zip(row).enumerate() {
                let mut y = T::mul(T::sub(v, mt), rt);
                if let Some(w) = weight {
                    y = T::mul(y, w[j]);
                }
                if let Some(b) = bias {
                    y = T::add(y, b[j]);
                }
                *o = y;
            }
            let at = start / len + i;
            // SAFETY: `at` is this row's index, below the row count that `mean` and `rstd`
            // hold, and each row is written by the one chunk that holds it.
            let (mp, rp) = (means, rstds);
            unsafe {
                *mp.0.add(at) = mt;
                *rp.0.add(at) = rt;
            }
        }
    });
}

/// A row's mean and `1/√(var + eps)`, both sums in f64.
fn moments<T: Arith>(row: &[T], eps: f64) -> (f64, f64) {
    let n = row.len() as f64;
    let mean = row.iter().map(|v| v.to_f64()).sum::<f64>() / n;
    let var = row.iter().map(|v| (v.to_f64() - mean).powi(2)).sum::<f64>() / n;
    (mean, 1.0 / (var + eps).sqrt())
}

/// The input's gradient of `layer_norm_rows`, from the incoming gradient `grad` and what the
/// forward saved: with `x̂ = (x − mean)·rstd` and `g = grad · weight`,
/// `gx = rstd · (g − mean(g) − x̂ · mean(g · x̂))`, the row sums in f64.
pub fn layer_norm_backward_rows<T: Arith>(
    (x, mean, rstd): (&[T], &[T], &[T]),
    weight: Option<&[T]>,
    grad: &[T],
    len: usize,
    gx: &mut [T],
) {
    if len == 0 {
        return;
    }
    chunked(gx, len, |start, o| {
        let rows = (x[start..start + o.len()].chunks(len))
            .zip(grad[start..start + o.len()].chunks(len))
            .zip(o.chunks_mut(len));
        for (i, ((xr, gr), orow)) in rows.enumerate() {
            let at = start / len + i;
            let (m, r) = (mean[at].to_f64(), rstd[at].to_f64());
            let scaled = |j: usize| gr[j].to_f64() * weight.map_or(1.0, |w| w[j].to_f64());
            let (mut sum, mut dot) = (0.0, 0.0);
            for (j, v) in xr.iter().enumerate() {
                let g = scaled(j);
                sum += g;
                dot += g * (v.to_f64() - m) * r;
            }
            let n = len as f64;
            for (j, (o, v)) in orow.iter_mut().zip(xr).enumerate() {
                let xhat = (v.to_f64() - m) * r;
                *o = T::from_f64(r * (scaled(j) - sum / n - xhat * dot / n));
            }
        }
    });
}
