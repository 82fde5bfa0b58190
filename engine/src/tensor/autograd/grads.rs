//! The backward formula of each differentiable op, with what its forward saves: for each op,
//! the tensors PyTorch's formula (`derivatives.yaml`) saves, and no more. Ops that need nothing
//! but shapes save nothing. Saved outputs are `detach`ed so a node never holds its own tensor
//! (which would be a reference cycle).

use super::{Backward, saved};
use crate::base::dtype::{DType, Scalar};
use crate::base::op::{BinaryOp, Op, UnaryOp};
use crate::device::error::Result;
use crate::device::layout::Layout;
use crate::storage::Storage;
use crate::tensor::Tensor;

impl Tensor {
    /// Sums a broadcast gradient back to `shape` (the shape of the input that was broadcast).
    pub(crate) fn sum_to(&self, shape: &[usize]) -> Result<Tensor> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        let lead = self.rank() - shape.len();
        let dims: Vec<i64> = (0..self.rank())
            .filter(|&i| i < lead || (shape[i - lead] == 1 && self.shape()[i] != 1))
            .map(|i| i as i64)
            .collect();
        let s = if dims.is_empty() {
            self.clone()
        } else {
            self.sum(dims, true)?
        };
        s.reshape(shape.to_vec())
    }
}

/// The error of a backward formula asked of an op that only backward passes run.
fn not_differentiated(op: BinaryOp) -> crate::device::error::Error {
    crate::device::error::Error::invalid(
        Op::Backward,
        format!("internal error: {} is not differentiated", op.name()),
    )
}

fn mask(cond: Tensor, like: &Tensor) -> Result<Tensor> {
    cond.to_dtype(like.dtype().to_float())
}

/// `t` to save when `needed`: detached, so a node never holds its own output (a cycle).
fn keep(t: &Tensor, needed: bool) -> Option<Tensor> {
    needed.then(|| t.detach())
}

/// One operand of a binary op: a tensor, or a Rust number the op turned into a 0-d tensor.
/// A number is kept as a number, as PyTorch keeps `x * 2.0`'s 2.0: it holds no memory.
pub(crate) enum Side<'a> {
    Tensor(&'a Tensor),
    Number(&'a Tensor, Scalar),
}

impl Side<'_> {
    fn tensor(&self) -> &Tensor {
        match self {
            Side::Tensor(t) | Side::Number(t, _) => t,
        }
    }
}

/// A saved operand: the tensor, or the number rebuilt as a 0-d tensor when the backward runs.
fn operand(
    s: &[Option<Tensor>],
    i: usize,
    number: Option<(Scalar, DType)>,
    g: &Tensor,
) -> Result<Tensor> {
    match number {
        Some((n, dtype)) => Tensor::scalar(n, (dtype, g.device())),
        None => Ok(saved(s, i)?.clone()),
    }
}

/// What each binary op's backward reads, as PyTorch's formulas: add and sub nothing, mul each
/// operand for the other's gradient, div the divisor (and the dividend for the divisor's
/// gradient), pow what each gradient reads, maximum/minimum both operands.
pub(crate) fn binary(op: BinaryOp, a: Side, b: Side, out: &Tensor) -> Backward {
    let number = |side: &Side| match side {
        Side::Number(t, n) => Some((*n, t.dtype())),
        Side::Tensor(_) => None,
    };
    let (num_a, num_b) = (number(&a), number(&b));
    let (a, b) = (a.tensor(), b.tensor());
    let (need_a, need_b) = (a.requires_grad(), b.requires_grad());
    let (shape_a, shape_b) = (a.shape().to_vec(), b.shape().to_vec());
    let (save_a, save_b, save_out) = match op {
        BinaryOp::Add | BinaryOp::Sub => (false, false, false),
        BinaryOp::Mul => (need_b, need_a, false),
        BinaryOp::Div => (need_b, true, false),
        // The base for both gradients, the exponent for the base's, the result for the
        // exponent's (so `x.pow(2.0)` saves `x` alone).
        BinaryOp::Pow => (true, need_a, need_b),
        BinaryOp::Maximum | BinaryOp::Minimum => (true, true, false),
        BinaryOp::ReluBackward => (false, false, false),
    };
    let saved_now = vec![
        keep(a, save_a && num_a.is_none()),
        keep(b, save_b && num_b.is_none()),
        keep(out, save_out),
    ];
    Backward::new(saved_now, move |g: &Tensor, s: Vec<Option<Tensor>>| {
        let a = || operand(&s, 0, num_a, g);
        let b = || operand(&s, 1, num_b, g);
        // maximum/minimum: the share of the gradient that goes to `a` (ties split it, as in
        // PyTorch).
        let share = |g: &Tensor| -> Result<Tensor> {
            let (a, b) = (a()?, b()?);
            let wins = if op == BinaryOp::Maximum {
                a.gt(&b)?
            } else {
                a.lt(&b)?
            };
            mask(wins, g)?.add(&mask(a.eq(&b)?, g)?.mul(0.5)?)
        };
        // Each gradient is computed only for an input that takes one, from what was saved for it.
        let ga = |g: &Tensor| -> Result<Tensor> {
            match op {
                BinaryOp::Add | BinaryOp::Sub => Ok(g.clone()),
                BinaryOp::Mul => g.mul(&b()?),
                BinaryOp::Div => g.div(&b()?),
                BinaryOp::Pow => {
                    let b = b()?;
                    g.mul(&b)?.mul(&a()?.pow(&b.sub(1.0)?)?)
                }
                BinaryOp::Maximum | BinaryOp::Minimum => g.mul(&share(g)?),
                BinaryOp::ReluBackward => Err(not_differentiated(op)),
            }
        };
        let gb = |g: &Tensor| -> Result<Tensor> {
            match op {
                BinaryOp::Add => Ok(g.clone()),
                BinaryOp::Sub => g.neg(),
                BinaryOp::Mul => g.mul(&a()?),
                BinaryOp::Div => {
                    let b = b()?;
                    g.mul(&a()?)?.div(&b.mul(&b)?)?.neg()
                }
                BinaryOp::Pow => {
                    // d/db a^b = a^b·ln a, taken as 0 where a = 0 (as PyTorch does).
                    let a = a()?;
                    let lg = g.mul(saved(&s, 2)?)?.mul(&a.log()?)?;
                    Tensor::where_cond(&a.eq(0.0)?, &lg.zeros_like()?, &lg)
                }
                BinaryOp::Maximum | BinaryOp::Minimum => g.mul(&share(g)?.rsub(1.0)?),
                BinaryOp::ReluBackward => Err(not_differentiated(op)),
            }
        };
        Ok(vec![
            need_a.then(|| ga(g)?.sum_to(&shape_a)).transpose()?,
            need_b.then(|| gb(g)?.sum_to(&shape_b)).transpose()?,
        ])
    })
}

/// What each unary op's backward reads, as PyTorch's: the output where the formula is written
/// in it (exp, sqrt, relu, sigmoid, tanh), the input otherwise, and nothing for neg.
pub(crate) fn unary(op: UnaryOp, x: &Tensor, out: &Tensor) -> Backward {
    let from_output = matches!(
        op,
        UnaryOp::Exp | UnaryOp::Sqrt | UnaryOp::Relu | UnaryOp::Sigmoid | UnaryOp::Tanh
    );
    let kept = match op {
        UnaryOp::Neg => None,
        _ if from_output => keep(out, true),
        _ => keep(x, true),
    };
    Backward::new(vec![kept], move |g: &Tensor, s: Vec<Option<Tensor>>| {
        let gx = match op {
            UnaryOp::Neg => g.neg()?,
            UnaryOp::Exp => g.mul(saved(&s, 0)?)?,
            UnaryOp::Log => g.div(saved(&s, 0)?)?,
            UnaryOp::Sqrt => g.div(&saved(&s, 0)?.mul(2.0)?)?,
            UnaryOp::Abs => {
                let x = saved(&s, 0)?;
                g.mul(&mask(x.gt(0.0)?, g)?.sub(&mask(x.lt(0.0)?, g)?)?)?
            }
            // One kernel, PyTorch's `threshold_backward`: the gradient where the output is
            // above 0 (or NaN), 0 elsewhere.
            UnaryOp::Relu => g.relu_backward(saved(&s, 0)?)?,
            UnaryOp::Sigmoid => {
                let out = saved(&s, 0)?;
                g.mul(&out.mul(&out.rsub(1.0)?)?)?
            }
            UnaryOp::Tanh => {
                let out = saved(&s, 0)?;
                g.mul(&out.mul(out)?.rsub(1.0)?)?
            }
            UnaryOp::Gelu => g.mul(&saved(&s, 0)?.unary_op(UnaryOp::GeluDerivative)?)?,
            UnaryOp::GeluDerivative => {
                return Err(crate::device::error::Error::invalid(
                    Op::Backward,
                    "internal error: gelu's derivative is not differentiated",
                ));
            }
        };
        Ok(vec![Some(gx)])
    })
}

pub(crate) fn clamp(x: &Tensor, lo: Option<Scalar>, hi: Option<Scalar>) -> Backward {
    Backward::new(
        vec![keep(x, true)],
        move |g: &Tensor, s: Vec<Option<Tensor>>| {
            let x = saved(&s, 0)?;
            let mut kept = mask(x.eq(x)?, g)?;
            if let Some(l) = lo {
                kept = kept.mul(&mask(x.ge(l.to_f64())?, g)?)?;
            }
            if let Some(h) = hi {
                kept = kept.mul(&mask(x.le(h.to_f64())?, g)?)?;
            }
            Ok(vec![Some(g.mul(&kept)?)])
        },
    )
}

/// `where` saves its condition (a bool tensor), as PyTorch's.
pub(crate) fn where_(cond: &Tensor, x_shape: Vec<usize>, y_shape: Vec<usize>) -> Backward {
    Backward::new(
        vec![keep(cond, true)],
        move |g: &Tensor, s: Vec<Option<Tensor>>| {
            let cond = saved(&s, 0)?;
            let zero = g.zeros_like()?;
            let gx = Tensor::where_cond(cond, g, &zero)?.sum_to(&x_shape)?;
            let gy = Tensor::where_cond(cond, &zero, g)?.sum_to(&y_shape)?;
            Ok(vec![None, Some(gx), Some(gy)])
        },
    )
}

/// Gradient of a sum or mean over `dims`: the gradient broadcast back over them.
pub(crate) fn sum(input: Vec<usize>, kept: Vec<usize>, count: Option<usize>) -> Backward {
    Backward::nothing_saved(move |g: &Tensor| {
        let g = g.reshape(kept)?.broadcast_to(input)?.contiguous()?;
        Ok(vec![Some(match count {
            Some(n) => g.div(n as f64)?,
            None => g,
        })])
    })
}

/// Gradient of max/min values over dims (PyTorch's `amax`, which saves the input and the
/// result): to the elements equal to the extreme, split on ties.
pub(crate) fn extreme(
    x: &Tensor,
    values_kept: &Tensor,
    kept: Vec<usize>,
    dims: Vec<i64>,
) -> Backward {
    let saved_now = vec![keep(x, true), keep(values_kept, true)];
    Backward::new(saved_now, move |g: &Tensor, s: Vec<Option<Tensor>>| {
        let hit = mask(saved(&s, 0)?.eq(saved(&s, 1)?)?, g)?;
        let ties = hit.sum(dims, true)?;
        Ok(vec![Some(g.reshape(kept)?.mul(&hit)?.div(&ties)?)])
    })
}

/// softmax and log_softmax save their output.
pub(crate) fn softmax(out: &Tensor, dim: i64, log: bool) -> Backward {
    Backward::new(
        vec![keep(out, true)],
        move |g: &Tensor, s: Vec<Option<Tensor>>| {
            let out = saved(&s, 0)?;
            if let Some(gx) = g.softmax_backward_fused(out, dim, log)? {
                return Ok(vec![Some(gx)]);
            }
            let gx = if log {
                g.sub(&out.exp()?.mul(&g.sum(dim, true)?)?)?
            } else {
                out.mul(&g.sub(&g.mul(out)?.sum(dim, true)?)?)?
            };
            Ok(vec![Some(gx)])
        },
    )
}

/// Batched matmul of operands with ≥ 2 dims: `dA = g·Bᵀ`, `dB = Aᵀ·g`, summed over broadcast
/// batches. Each operand is saved only for the other's gradient, as PyTorch's `mm`: a first
/// layer's weight is not saved, because its input (the data) takes no gradient.
pub(crate) fn matmul(a: &Tensor, b: &Tensor) -> Backward {
    let needs = [a.requires_grad(), b.requires_grad()];
    let (shape_a, shape_b) = (a.shape().to_vec(), b.shape().to_vec());
    let b_transposed = is_transposed_matrix(b.layout());
    let saved_now = vec![keep(a, needs[1]), keep(b, needs[0])];
    Backward::new(saved_now, move |g: &Tensor, s: Vec<Option<Tensor>>| {
        let ga = if needs[0] {
            Some(
                g.matmul(&saved(&s, 1)?.transpose(-1, -2)?)?
                    .sum_to(&shape_a)?,
            )
        } else {
            None
        };
        let gb = if !needs[1] {
            None
        } else if shape_a.len() == 2 && g.rank() == 2 && b_transposed {
            // `b` is the transpose of a contiguous matrix (`Linear`'s `weight.t()`): (gᵀ·a)ᵀ
            // holds the same values as aᵀ·g, laid out so that the gradient reaching the weight
            // is contiguous and is stored and stepped without a transposed copy.
            Some(
                g.transpose(-1, -2)?
                    .matmul(saved(&s, 0)?)?
                    .transpose(-1, -2)?,
            )
        } else {
            Some(
                saved(&s, 0)?
                    .transpose(-1, -2)?
                    .matmul(g)?
                    .sum_to(&shape_b)?,
            )
        };
        Ok(vec![ga, gb])
    })
}

/// `bias + a·b` (addmm): the bias's gradient is the incoming one summed to the bias's shape (a
/// `Linear`'s bias gradient, one reduction down the columns), computed first as the separate
/// add's backward was; the matrices' as `matmul`'s.
pub(crate) fn addmm(bias: &Tensor, a: &Tensor, b: &Tensor) -> Backward {
    let (needs_bias, bias_shape) = (bias.requires_grad(), bias.shape().to_vec());
    let Backward { saved, f } = matmul(a, b);
    Backward::new(saved, move |g: &Tensor, s: Vec<Option<Tensor>>| {
        let gbias = match needs_bias {
            true => Some(g.sum_to(&bias_shape)?),
            false => None,
        };
        let mut grads = f(g, s)?;
        grads.insert(0, gbias);
        Ok(grads)
    })
}

/// Whether `l` is a 2-D view whose transpose is contiguous (and it is not contiguous itself).
fn is_transposed_matrix(l: &Layout) -> bool {
    l.shape.len() == 2 && !l.is_contiguous() && l.permuted(&[1, 0]).is_contiguous()
}

/// Gradient of `narrow`: the gradient placed in its window, zeros around it.
pub(crate) fn narrow(input: Vec<usize>, dim: usize, start: usize) -> Backward {
    Backward::nothing_saved(move |g: &Tensor| {
        let mut parts = Vec::new();
        let zeros = |n: usize| {
            let mut s = input.clone();
            s[dim] = n;
            Tensor::zeros(s, (g.dtype(), g.device()))
        };
        let after = input[dim] - start - g.shape()[dim];
        if start > 0 {
            parts.push(zeros(start)?);
        }
        parts.push(g.clone());
        if after > 0 {
            parts.push(zeros(after)?);
        }
        Ok(vec![Some(Tensor::cat(
            &parts.iter().collect::<Vec<_>>(),
            dim,
        )?)])
    })
}

/// Gradient of `cat`: each input's slice of the gradient.
pub(crate) fn cat(sizes: Vec<usize>, dim: usize) -> Backward {
    Backward::nothing_saved(move |g: &Tensor| {
        let mut at = 0;
        let mut out = Vec::new();
        for n in sizes {
            out.push(Some(g.narrow(dim, at, n)?));
            at += n;
        }
        Ok(out)
    })
}

/// Gradient of `index_select`: each row of the gradient added back at its position, into a
/// zero gradient of the input's shape (a scatter-add; rows that picked the same position add
/// up). Memory is the input's gradient and one row at a time, whatever the number of positions.
pub(crate) fn index_select(input: Vec<usize>, dim: usize, positions: Vec<usize>) -> Backward {
    Backward::nothing_saved(move |g: &Tensor| {
        let grad = index_select_grad(g, input, dim, &positions)?;
        Ok(vec![Some(grad), None])
    })
}

/// The gradient of `index_select` along `dim` of an input of shape `input` at `positions`: `g`'s
/// entries summed into the rows they were read from.
pub(crate) fn index_select_grad(
    g: &Tensor,
    input: Vec<usize>,
    dim: usize,
    positions: &[usize],
) -> Result<Tensor> {
    let numel = crate::device::layout::numel_checked("index_select backward", &input)?;
    let mut grad = Storage::full(g.device(), g.dtype(), numel, Scalar::Int(0))?;
    let mut rows_of: std::collections::BTreeMap<usize, Vec<i64>> = Default::default();
    for (row, &p) in positions.iter().enumerate() {
        rows_of.entry(p).or_default().push(row as i64);
    }
    let layout = Layout::contiguous(input.clone());
    for (p, rows) in rows_of {
        let summed = match rows.as_slice() {
            [row] => g.narrow(dim, *row as usize, 1)?,
            _ => {
                let n = rows.len();
                let index = Tensor::engine_values(&rows, vec![n], g.device())?;
                g.index_select(dim, &index)?
                    .sum(dim, true)?
                    .to_dtype(g.dtype())?
            }
        };
        let mut dst = layout.clone();
        dst.offset = p * dst.strides[dim];
        dst.shape[dim] = 1;
        grad.write_view(&dst, summed.storage(), summed.layout())?;
    }
    Ok(Tensor::from_storage(grad, input))
}

/// Gradient of a view op: the gradient reshaped back (reshape, squeeze, unsqueeze, flatten).
pub(crate) fn reshape(input: Vec<usize>) -> Backward {
    Backward::nothing_saved(move |g: &Tensor| Ok(vec![Some(g.reshape(input)?)]))
}

/// Gradient of `permute(perm)`: the gradient permuted back.
pub(crate) fn permute(perm: Vec<usize>) -> Backward {
    Backward::nothing_saved(move |g: &Tensor| {
        let mut inverse = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i;
        }
        Ok(vec![Some(g.permute(inverse)?)])
    })
}

/// Gradient of ops that pass values through unchanged (copies, casts, device moves): the same
/// gradient, cast and moved back by the engine.
pub(crate) fn identity() -> Backward {
    Backward::nothing_saved(|g: &Tensor| Ok(vec![Some(g.clone())]))
}

/// The layout of a broadcast view, for `broadcast_to`'s gradient.
pub(crate) fn broadcast(input: Vec<usize>) -> Backward {
    Backward::nothing_saved(move |g: &Tensor| Ok(vec![Some(g.sum_to(&input)?)]))
}
