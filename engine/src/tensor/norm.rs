//! Layer normalization, `torch.nn.functional.layer_norm`: each row of the input's last dims is
//! scaled to mean 0 and variance 1, then by an optional weight and bias, in one kernel forward
//! (`Storage::layer_norm_rows`) and one for the input's gradient backward.

use super::autocast;
use super::autograd::{Backward, no_grad, record, saved};
use super::{Tensor, same_device};
use crate::base::dtype::DType;
use crate::base::op::Op;
use crate::device::error::{Error, Result};
use crate::device::layout::IntoShape;
use crate::storage::Storage;

impl Tensor {
    /// `torch.nn.functional.layer_norm(x, normalized_shape, weight, bias, eps)`: normalizes
    /// over the last dims, which must be `normalized_shape`, with the biased variance:
    /// `(x − mean) / √(var + eps) · weight + bias`. `weight` and `bias`, if given, have that
    /// shape. f16/bf16 compute in f32 and come back in their dtype; under `autocast` the op runs
    /// in f32 and gives f32, as PyTorch's.
    pub fn layer_norm(
        &self,
        normalized_shape: impl IntoShape,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        let _op = self.profiled(Op::LayerNorm);
        let normalized = normalized_shape.into_shape();
        check(self, &normalized, [weight, bias], eps)?;
        // Autocast's rule: layer norm runs in f32 (PyTorch's fp32 list), its f16/bf16 operands
        // cast (and the casts recorded, so gradients flow back in their dtypes).
        let cast = |t: &Tensor| autocast::for_full_precision(t);
        let (cx, cw, cb) = (
            cast(self)?,
            weight.map(cast).transpose()?,
            bias.map(cast).transpose()?,
        );
        let (cw, cb) = (cw.flatten(), cb.flatten());
        if cx.is_some() || cw.is_some() || cb.is_some() {
            let x = cx.as_ref().unwrap_or(self);
            let affine = (cw.as_ref().or(weight), cb.as_ref().or(bias));
            return x.layer_norm_recorded(&normalized, affine, eps);
        }
        self.layer_norm_recorded(&normalized, (weight, bias), eps)
    }

    fn layer_norm_recorded(
        &self,
        normalized: &[usize],
        (weight, bias): (Option<&Tensor>, Option<&Tensor>),
        eps: f64,
    ) -> Result<Tensor> {
        let len: usize = normalized.iter().product();
        let compute = compute_dtype(self.dtype());
        let packed = |t: &Tensor| t.to_dtype(compute)?.contiguous();
        let (out, x, mean, rstd, w) = no_grad(|| -> Result<_> {
            let x = packed(self)?;
            let w = weight.map(packed).transpose()?;
            let b = bias.map(packed).transpose()?;
            let affine = (
                w.as_ref().map(Tensor::storage),
                b.as_ref().map(Tensor::storage),
            );
            let [y, mean, rstd] = x.storage().layer_norm_rows(affine, len, eps)?;
            let out = Tensor::from_storage(y, self.shape().to_vec()).to_dtype(self.dtype())?;
            let rows = x.numel().checked_div(len).unwrap_or(0);
            let stats = |s| Tensor::from_storage(s, vec![rows, 1]);
            Ok((out, x, stats(mean), stats(rstd), w))
        })?;
        let mut inputs = vec![self];
        inputs.extend(weight);
        inputs.extend(bias);
        let meta = Meta {
            normalized: normalized.to_vec(),
            len,
            input: self.dtype(),
            weight: weight.map(Tensor::dtype),
            bias: bias.map(Tensor::dtype),
            needs: [
                self.requires_grad(),
                weight.is_some_and(Tensor::requires_grad),
                bias.is_some_and(Tensor::requires_grad),
            ],
        };
        let backward = || backward([x, mean, rstd], w, meta);
        Ok(record(out, Op::LayerNorm, &inputs, backward))
    }
}

/// What layer norm's backward needs besides the tensors it saves: the normalized shape, its
/// element count, and the dtype of each input's gradient (`None`: no such input).
struct Meta {
    normalized: Vec<usize>,
    len: usize,
    input: DType,
    weight: Option<DType>,
    bias: Option<DType>,
    /// Which of input, weight and bias take a gradient: the others' are not computed (a first
    /// layer's input, the data, takes none).
    needs: [bool; 3],
}

/// Layer norm's gradients (PyTorch's `native_layer_norm_backward`), saving what PyTorch saves:
/// the input (in its compute dtype), the weight, and each row's mean and rstd. The input's
/// gradient is one kernel; the weight's, `Σ g·x̂` over the rows, and the bias's, `Σ g`, are sums.
fn backward([x, mean, rstd]: [Tensor; 3], w: Option<Tensor>, meta: Meta) -> Backward {
    let saved_now = vec![
        Some(x.detach()),
        Some(mean),
        Some(rstd),
        w.map(|w| w.detach()),
    ];
    Backward::new(saved_now, move |g: &Tensor, s: Vec<Option<Tensor>>| {
        let (x, mean, rstd) = (saved(&s, 0)?, saved(&s, 1)?, saved(&s, 2)?);
        let g = g.to_dtype(x.dtype())?.contiguous()?;
        let w = s.get(3).and_then(Option::as_ref);
        let mut grads = vec![None];
        if meta.needs[0] {
            let stats = [x.storage(), mean.storage(), rstd.storage()];
            let w = w.map(Tensor::storage);
            let gx = Storage::layer_norm_backward_rows(stats, w, g.storage(), meta.len)?;
            let gx = Tensor::from_storage(gx, x.shape().to_vec()).to_dtype(meta.input)?;
            grads[0] = Some(gx);
        }
        let rows = [x.numel().checked_div(meta.len).unwrap_or(0), meta.len];
        let g_rows = g.reshape(rows)?;
        // Each affine gradient a sum over the rows, in its parameter's shape and dtype; `None`
        // for one that takes no gradient, so the list stays aligned with the inputs.
        let summed = |t: Tensor, dtype: DType| -> Result<Tensor> {
            t.sum(0, false)?
                .reshape(meta.normalized.clone())?
                .to_dtype(dtype)
        };
        if let Some(dtype) = meta.weight {
            grads.push(match meta.needs[1] {
                true => {
                    let xhat = x.reshape(rows)?.sub(mean)?.mul(rstd)?;
                    Some(summed(g_rows.mul(&xhat)?, dtype)?)
                }
                false => None,
            });
        }
        if let Some(dtype) = meta.bias {
            grads.push(match meta.needs[2] {
                true => Some(summed(g_rows.clone(), dtype)?),
                false => None,
            });
        }
        Ok(grads)
    })
}

/// The float dtype layer norm computes in: f64 for f64, else f32.
fn compute_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// Layer norm's arguments, checked as PyTorch checks them, each failure saying how to fix it.
fn check(x: &Tensor, normalized: &[usize], affine: [Option<&Tensor>; 2], eps: f64) -> Result<()> {
    let mut args = vec![("input", x)];
    args.extend(affine[0].map(|w| ("weight", w)));
    args.extend(affine[1].map(|b| ("bias", b)));
    same_device(Op::LayerNorm, &args)?;
    for (name, t) in &args {
        if !t.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: Op::LayerNorm.name(),
                dtype: t.dtype(),
                hint: format!(
                    "layer_norm's {name} must be a float tensor; convert it first, e.g. `.to_dtype(DType::F32)?`."
                ),
            });
        }
    }
    let rank = x.rank();
    if normalized.is_empty()
        || normalized.len() > rank
        || x.shape()[rank - normalized.len()..] != *normalized
    {
        return Err(Error::invalid(
            Op::LayerNorm,
            format!(
                "normalized_shape {normalized:?} must be the input's last dimensions (at least one), but the input has shape {:?}; pass e.g. `[{}]` to normalize over its last dimension",
                x.shape(),
                x.shape().last().copied().unwrap_or(1),
            ),
        ));
    }
    for (name, t) in args.iter().skip(1) {
        if t.shape() != normalized {
            return Err(Error::invalid(
                Op::LayerNorm,
                format!(
                    "{name} has shape {:?}, but normalized_shape is {normalized:?}: give a {name} of that shape",
                    t.shape()
                ),
            ));
        }
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::invalid(
            Op::LayerNorm,
            format!("eps must be a finite number ≥ 0, got {eps}"),
        ));
    }
    Ok(())
}
