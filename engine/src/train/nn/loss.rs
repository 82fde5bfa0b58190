//! Losses, averaged over the batch as PyTorch's defaults (`reduction=Op::Mean`). Under autocast
//! they compute in f32 whatever the dtype of their input.

use crate::base::dtype::DType;
use crate::base::op::Op;
use crate::device::error::{Error, Result};
use crate::tensor::autograd::{Backward, no_grad, record, saved as saved_tensor};
use crate::tensor::{Tensor, same_device};

/// Checks class-index targets against `[N, C]` scores and returns them as `[N, C]` rows in `dtype`
/// on the scores' device: −1 at each row's class, 0 elsewhere (`picks`).
fn one_hot(op: Op, scores: &Tensor, target: &Tensor, dtype: DType) -> Result<Tensor> {
    same_device(op, &[("input", scores), ("target", target)])?;
    if scores.rank() != 2 {
        return Err(Error::invalid(
            op,
            format!(
                "the input must be [batch, classes], got shape {:?}",
                scores.shape()
            ),
        ));
    }
    let (n, c) = (scores.shape()[0], scores.shape()[1]);
    if target.dtype() != DType::I64 {
        return Err(Error::DTypeMismatch {
            op: op.name(),
            lhs: target.dtype(),
            rhs: DType::I64,
            hint: "Targets are class indices and must be i64 (PyTorch's long); convert with `target.to_dtype(DType::I64)?`.".into(),
        });
    }
    if target.shape() != [n] {
        return Err(Error::ShapeMismatch {
            op: op.name(),
            lhs: scores.shape().to_vec(),
            rhs: target.shape().to_vec(),
            why: format!("the target must hold one class index per row of the input, shape [{n}]"),
        });
    }
    picks(op, target, c, dtype)
}

/// One row per class index in `target` (checked to lie in `0..c`): −1 at the class, 0 elsewhere.
/// The sign is the loss's: `x · picks` summed is exactly `−Σ x[i, target_i]`, and the gradient
/// `picks · (g / n)` exactly `(−g) / n` at each class, one kernel fewer each way than negating.
/// One op (`one_hot`) on every device, so a simulated GPU's profile lists what a real one runs.
fn picks(op: Op, target: &Tensor, c: usize, dtype: DType) -> Result<Tensor> {
    target.class_rows(c, dtype, None, op)
}

/// nll_loss's gradient for the loss's gradient `g`: `−g / total_weight` at each row's class, 0
/// elsewhere, in one op as PyTorch's `nll_loss_backward`. The same values as the picks times
/// `g / total_weight`, which a `g` of another shape or dtype takes.
fn nll_gradient(target: &Tensor, c: usize, g: &Tensor, total_weight: &Tensor) -> Result<Tensor> {
    let dtype = g.dtype();
    let scalar = g.numel() == 1
        && dtype == total_weight.dtype()
        && matches!(dtype, DType::F32 | DType::F64)
        && g.device() == target.device();
    if !scalar {
        return picks(Op::NllLoss, target, c, dtype)?.mul(&g.div(total_weight)?);
    }
    target.class_rows(c, dtype, Some([g, total_weight]), Op::NllLoss)
}

/// The loss input in f32 (or f64): losses are always accumulated in full precision.
fn full_precision(x: &Tensor) -> Result<Tensor> {
    if x.dtype() == DType::F64 {
        Ok(x.clone())
    } else {
        x.to_dtype(DType::F32)
    }
}

/// Cross-entropy between raw scores `[N, C]` and class indices `[N]` (i64): the mean of
/// `-log_softmax(scores)[i, target_i]`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CrossEntropyLoss;

impl CrossEntropyLoss {
    pub fn new() -> Self {
        CrossEntropyLoss
    }

    pub fn forward(&self, input: &Tensor, target: &Tensor) -> Result<Tensor> {
        let logp = full_precision(input)?.log_softmax(1)?;
        NLLLoss.forward(&logp, target)
    }
}

/// Negative log-likelihood of log-probabilities `[N, C]` for class indices `[N]`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NLLLoss;

impl NLLLoss {
    pub fn new() -> Self {
        NLLLoss
    }

    /// One recorded op, as PyTorch's `nll_loss`: its backward keeps the targets and the 0-d
    /// `total_weight` the mean divides by (the batch size), not the one-hot rows it picks with.
    pub fn forward(&self, input: &Tensor, target: &Tensor) -> Result<Tensor> {
        let x = full_precision(input)?;
        let picked = one_hot(Op::NllLoss, &x, target, x.dtype())?;
        let (n, c) = (x.shape()[0], x.shape()[1]);
        let total_weight = Tensor::scalar(n as f64, (x.dtype(), x.device()))?;
        let loss = no_grad(|| x.mul(&picked)?.sum_all()?.div(&total_weight))?;
        drop(picked);
        let backward = || {
            let saved = vec![Some(target.detach()), Some(total_weight.detach())];
            Backward::new(saved, move |g: &Tensor, s: Vec<Option<Tensor>>| {
                let (target, total_weight) = (saved_tensor(&s, 0)?, saved_tensor(&s, 1)?);
                Ok(vec![Some(nll_gradient(target, c, g, total_weight)?)])
            })
        };
        Ok(record(loss, Op::NllLoss, &[&x], backward))
    }
}

/// Mean squared error between two tensors of one shape.
#[derive(Debug, Clone, Copy, Default)]
pub struct MSELoss;

impl MSELoss {
    pub fn new() -> Self {
        MSELoss
    }

    pub fn forward(&self, input: &Tensor, target: &Tensor) -> Result<Tensor> {
        same_device(Op::MseLoss, &[("input", input), ("target", target)])?;
        if input.shape() != target.shape() {
            return Err(Error::ShapeMismatch {
                op: Op::MseLoss.name(),
                lhs: input.shape().to_vec(),
                rhs: target.shape().to_vec(),
                why: "input and target must have the same shape (PyTorch would broadcast them and warn; that is almost always a bug)".into(),
            });
        }
        let (x, t) = (full_precision(input)?, full_precision(target)?);
        let loss = no_grad(|| {
            let d = x.sub(&t)?;
            d.mul(&d)?.mean_all()
        })?;
        // One recorded op, as PyTorch's `mse_loss`: its backward keeps the input and the
        // target, and computes 2·(input − target)/N from them.
        let count = x.numel() as f64;
        let backward = || {
            let saved = vec![Some(x.detach()), Some(t.detach())];
            Backward::new(saved, move |g: &Tensor, s: Vec<Option<Tensor>>| {
                let d = saved_tensor(&s, 0)?.sub(saved_tensor(&s, 1)?)?;
                let gx = d.mul(&g.mul(2.0 / count)?)?;
                let gt = gx.neg()?;
                Ok(vec![Some(gx), Some(gt)])
            })
        };
        Ok(record(loss, Op::MseLoss, &[&x, &t], backward))
    }
}
