//! The backward formula of each differentiable op: given what the forward saved, a closure from
//! the output's gradient to the inputs'. Saved outputs are `detach`ed so a node never holds its
//! own tensor (which would be a reference cycle).

use crate::layout::Layout;
use crate::op::{BinaryOp, UnaryOp};
use crate::storage::Storage;
use crate::{Result, Scalar, Tensor};

type Grads = Result<Vec<Option<Tensor>>>;

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

fn mask(cond: Tensor, like: &Tensor) -> Result<Tensor> {
    cond.to_dtype(like.dtype().to_float())
}

pub(crate) fn binary(
    op: BinaryOp,
    a: Tensor,
    b: Tensor,
    out: Tensor,
) -> impl FnOnce(&Tensor) -> Grads + Send + Sync {
    move |g: &Tensor| {
        let (ga, gb) = match op {
            BinaryOp::Add => (g.clone(), g.clone()),
            BinaryOp::Sub => (g.clone(), g.neg()?),
            BinaryOp::Mul => (g.mul(&b)?, g.mul(&a)?),
            BinaryOp::Div => (g.div(&b)?, g.mul(&a)?.div(&b.mul(&b)?)?.neg()?),
            BinaryOp::Pow => {
                let ga = g.mul(&b)?.mul(&a.pow(&b.sub(1.0)?)?)?;
                // d/db a^b = a^b·ln a, taken as 0 where a = 0 (as PyTorch does).
                let lg = g.mul(&out)?.mul(&a.log()?)?;
                let gb = Tensor::where_cond(&a.eq(0.0)?, &lg.zeros_like()?, &lg)?;
                (ga, gb)
            }
            BinaryOp::Maximum | BinaryOp::Minimum => {
                let wins = if op == BinaryOp::Maximum {
                    a.gt(&b)?
                } else {
                    a.lt(&b)?
                };
                // Ties split the gradient, as in PyTorch.
                let share = mask(wins, g)?.add(&mask(a.eq(&b)?, g)?.mul(0.5)?)?;
                (g.mul(&share)?, g.mul(&share.rsub(1.0)?)?)
            }
        };
        Ok(vec![
            Some(ga.sum_to(a.shape())?),
            Some(gb.sum_to(b.shape())?),
        ])
    }
}

pub(crate) fn unary(
    op: UnaryOp,
    x: Tensor,
    out: Tensor,
) -> impl FnOnce(&Tensor) -> Grads + Send + Sync {
    move |g: &Tensor| {
        let gx = match op {
            UnaryOp::Neg => g.neg()?,
            UnaryOp::Exp => g.mul(&out)?,
            UnaryOp::Log => g.div(&x)?,
            UnaryOp::Sqrt => g.div(&out.mul(2.0)?)?,
            UnaryOp::Abs => g.mul(&mask(x.gt(0.0)?, g)?.sub(&mask(x.lt(0.0)?, g)?)?)?,
            UnaryOp::Relu => g.mul(&mask(x.gt(0.0)?, g)?)?,
            UnaryOp::Sigmoid => g.mul(&out.mul(&out.rsub(1.0)?)?)?,
            UnaryOp::Tanh => g.mul(&out.mul(&out)?.rsub(1.0)?)?,
            UnaryOp::Gelu => g.mul(&x.unary_op(UnaryOp::GeluDerivative)?)?,
            UnaryOp::GeluDerivative => unreachable!("not differentiated"),
        };
        Ok(vec![Some(gx)])
    }
}

pub(crate) fn clamp(
    x: Tensor,
    lo: Option<Scalar>,
    hi: Option<Scalar>,
) -> impl FnOnce(&Tensor) -> Grads + Send + Sync {
    move |g: &Tensor| {
        let mut keep = mask(x.eq(&x)?, g)?;
        if let Some(l) = lo {
            keep = keep.mul(&mask(x.ge(l.to_f64())?, g)?)?;
        }
        if let Some(h) = hi {
            keep = keep.mul(&mask(x.le(h.to_f64())?, g)?)?;
        }
        Ok(vec![Some(g.mul(&keep)?)])
    }
}

pub(crate) fn where_(
    cond: Tensor,
    x_shape: Vec<usize>,
    y_shape: Vec<usize>,
) -> impl FnOnce(&Tensor) -> Grads + Send + Sync {
    move |g: &Tensor| {
        let zero = g.zeros_like()?;
        let gx = Tensor::where_cond(&cond, g, &zero)?.sum_to(&x_shape)?;
        let gy = Tensor::where_cond(&cond, &zero, g)?.sum_to(&y_shape)?;
        Ok(vec![None, Some(gx), Some(gy)])
    }
}

/// Gradient of a sum or mean over `dims`: the gradient broadcast back over them.
pub(crate) fn sum(
    input: Vec<usize>,
    kept: Vec<usize>,
    count: Option<usize>,
) -> impl FnOnce(&Tensor) -> Grads + Send + Sync {
    move |g: &Tensor| {
        let g = g.reshape(kept)?.broadcast_to(input)?.contiguous()?;
        Ok(vec![Some(match count {
            Some(n) => g.div(n as f64)?,
            None => g,
        })])
    }
}

/// Gradient of max/min values over dims: to the elements equal to the extreme, split on ties.
pub(crate) fn extreme(
    x: Tensor,
    values_kept: Tensor,
    kept: Vec<usize>,
    dims: Vec<i64>,
) -> impl FnOnce(&Tensor) -> Grads + Send + Sync {
    move |g: &Tensor| {
        let hit = mask(x.eq(&values_kept)?, g)?;
        let ties = hit.sum(dims, true)?;
        Ok(vec![Some(g.reshape(kept)?.mul(&hit)?.div(&ties)?)])
    }
}

pub(crate) fn softmax(
    out: Tensor,
    dim: i64,
    log: bool,
) -> impl FnOnce(&Tensor) -> Grads + Send + Sync {
    move |g: &Tensor| {
        let gx = if log {
            g.sub(&out.exp()?.mul(&g.sum(dim, true)?)?)?
        } else {
            out.mul(&g.sub(&g.mul(&out)?.sum(dim, true)?)?)?
        };
        Ok(vec![Some(gx)])
    }
}

/// Batched matmul of operands with ≥ 2 dims: `dA = g·Bᵀ`, `dB = Aᵀ·g`, summed over broadcast batches.
/// Only the gradients an input needs are computed (the data of a first layer needs none).
pub(crate) fn matmul(
    a: Tensor,
    b: Tensor,
    needs: [bool; 2],
) -> impl FnOnce(&Tensor) -> Grads + Send + Sync {
    move |g: &Tensor| {
        let ga = if needs[0] {
            Some(g.matmul(&b.transpose(-1, -2)?)?.sum_to(a.shape())?)
        } else {
            None
        };
        let gb = if !needs[1] {
            None
        } else if a.rank() == 2 && g.rank() == 2 && is_transposed_matrix(b.layout()) {
            // `b` is the transpose of a contiguous matrix (`Linear`'s `weight.t()`): (gᵀ·a)ᵀ
            // holds the same values as aᵀ·g, laid out so that the gradient reaching the weight
            // is contiguous and is stored and stepped without a transposed copy.
            Some(g.transpose(-1, -2)?.matmul(&a)?.transpose(-1, -2)?)
        } else {
            Some(a.transpose(-1, -2)?.matmul(g)?.sum_to(b.shape())?)
        };
        Ok(vec![ga, gb])
    }
}

/// Whether `l` is a 2-D view whose transpose is contiguous (and it is not contiguous itself).
fn is_transposed_matrix(l: &Layout) -> bool {
    l.shape.len() == 2 && !l.is_contiguous() && l.permuted(&[1, 0]).is_contiguous()
}

/// Gradient of `narrow`: the gradient placed in its window, zeros around it.
pub(crate) fn narrow(
    input: Vec<usize>,
    dim: usize,
    start: usize,
) -> impl FnOnce(&Tensor) -> Grads + Send + Sync {
    move |g: &Tensor| {
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
    }
}

/// Gradient of `cat`: each input's slice of the gradient.
pub(crate) fn cat(sizes: Vec<usize>, dim: usize) -> impl FnOnce(&Tensor) -> Grads + Send + Sync {
    move |g: &Tensor| {
        let mut at = 0;
        let mut out = Vec::new();
        for n in sizes {
            out.push(Some(g.narrow(dim, at, n)?));
            at += n;
        }
        Ok(out)
    }
}

/// Gradient of `index_select`: each row of the gradient added back at its position, into a
/// zero gradient of the input's shape (a scatter-add; rows that picked the same position add
/// up). Memory is the input's gradient and one row at a time, whatever the number of positions.
pub(crate) fn index_select(
    input: Vec<usize>,
    dim: usize,
    positions: Vec<usize>,
) -> impl FnOnce(&Tensor) -> Grads + Send + Sync {
    move |g: &Tensor| {
        let numel = crate::layout::numel_checked("index_select backward", &input)?;
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
                    let index = Tensor::from_vec(rows, [n], g.device())?;
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
        Ok(vec![Some(Tensor::from_storage(grad, input)), None])
    }
}

/// Gradient of a view op: the gradient reshaped back (reshape, squeeze, unsqueeze, flatten).
pub(crate) fn reshape(input: Vec<usize>) -> impl FnOnce(&Tensor) -> Grads + Send + Sync {
    move |g: &Tensor| Ok(vec![Some(g.reshape(input)?)])
}

/// Gradient of `permute(perm)`: the gradient permuted back.
pub(crate) fn permute(perm: Vec<usize>) -> impl FnOnce(&Tensor) -> Grads + Send + Sync {
    move |g: &Tensor| {
        let mut inverse = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i;
        }
        Ok(vec![Some(g.permute(inverse)?)])
    }
}

/// Gradient of ops that pass values through unchanged (copies, casts, device moves): the same
/// gradient, cast and moved back by the engine.
pub(crate) fn identity() -> impl FnOnce(&Tensor) -> Grads + Send + Sync {
    |g: &Tensor| Ok(vec![Some(g.clone())])
}

/// The layout of a broadcast view, for `broadcast_to`'s gradient.
pub(crate) fn broadcast(input: Vec<usize>) -> impl FnOnce(&Tensor) -> Grads + Send + Sync {
    move |g: &Tensor| Ok(vec![Some(g.sum_to(&input)?)])
}
