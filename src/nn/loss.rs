//! Losses, averaged over the batch as PyTorch's defaults (`reduction="mean"`). Under autocast
//! they compute in f32 whatever the dtype of their input.

use crate::tensor::same_device;
use crate::{DType, Error, Result, Tensor};

/// Checks class-index targets against `[N, C]` scores and returns them as a one-hot `[N, C]`
/// tensor in `dtype` on the scores' device.
fn one_hot(op: &'static str, scores: &Tensor, target: &Tensor, dtype: DType) -> Result<Tensor> {
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
            op,
            lhs: target.dtype(),
            rhs: DType::I64,
            hint: "Targets are class indices and must be i64 (PyTorch's long); convert with `target.to_dtype(DType::I64)?`.".into(),
        });
    }
    if target.shape() != [n] {
        return Err(Error::ShapeMismatch {
            op,
            lhs: scores.shape().to_vec(),
            rhs: target.shape().to_vec(),
            why: format!("the target must hold one class index per row of the input, shape [{n}]"),
        });
    }
    let classes = target.to_vec::<i64>()?;
    let mut hot = vec![0.0f64; n * c];
    for (i, &k) in classes.iter().enumerate() {
        if k < 0 || k as usize >= c {
            return Err(Error::IndexOutOfRange {
                op,
                index: k,
                dim: 1,
                size: c,
            });
        }
        hot[i * c + k as usize] = 1.0;
    }
    Tensor::from_vec(hot, [n, c], (dtype, scores.device()))
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

    pub fn forward(&self, input: &Tensor, target: &Tensor) -> Result<Tensor> {
        let x = full_precision(input)?;
        let hot = one_hot("nll_loss", &x, target, x.dtype())?;
        x.mul(&hot)?.sum(1, false)?.mean_all()?.neg()
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
        same_device("mse_loss", &[("input", input), ("target", target)])?;
        if input.shape() != target.shape() {
            return Err(Error::ShapeMismatch {
                op: "mse_loss",
                lhs: input.shape().to_vec(),
                rhs: target.shape().to_vec(),
                why: "input and target must have the same shape (PyTorch would broadcast them and warn; that is almost always a bug)".into(),
            });
        }
        let d = full_precision(input)?.sub(&full_precision(target)?)?;
        d.mul(&d)?.mean_all()
    }
}
