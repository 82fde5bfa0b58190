//! Reductions (sum, mean, max, min, argmax, argmin) over all or given dims, softmax and
//! log-softmax.

use super::Tensor;
use crate::base::dtype::DType;
use crate::base::op::Op;
use crate::device::error::{Error, Result};
use crate::device::layout::{Dim, Dims, resolve_dim, resolve_dims};
use crate::storage::Storage;
use crate::tensor::autograd::{grads, no_grad, record};

/// A tensor rearranged so the reduced dims are last and contiguous: `rows × len` elements.
struct Rows {
    data: Tensor,
    rows: usize,
    len: usize,
    out_shape: Vec<usize>,
    /// The output shape with the reduced dims kept as size 1.
    kept_shape: Vec<usize>,
    /// The reduced dims.
    reduced: Vec<i64>,
    /// `data` is `len` rows of `rows` elements (the reduced dims lead), not `rows` rows of
    /// `len`: a contiguous tensor reduced over its leading dims needs no transposed copy.
    reduced_first: bool,
}

impl Tensor {
    /// This tensor as rows to reduce: the kept dims first, the reduced ones last, copied so when
    /// they are not; a contiguous tensor reduced over its leading dims is taken as it is
    /// (`reduced_first`).
    fn to_rows(&self, op: Op, dims: Option<Vec<i64>>, keepdim: bool) -> Result<Rows> {
        let rank = self.rank();
        let reduced = match dims {
            None => (0..rank).collect(),
            Some(d) if d.is_empty() => (0..rank).collect(),
            Some(d) => resolve_dims(op.name(), &d, rank)?,
        };
        let reduced: Vec<usize> = reduced.into_iter().filter(|&d| d < rank).collect();
        let kept: Vec<usize> = (0..rank).filter(|d| !reduced.contains(d)).collect();
        let leading = !kept.is_empty() && reduced.iter().enumerate().all(|(i, &d)| i == d);
        let reduced_first = leading && self.layout().is_contiguous();
        let data = if reduced_first {
            no_grad(|| self.contiguous())?
        } else {
            let perm: Vec<usize> = kept.iter().chain(&reduced).copied().collect();
            no_grad(|| self.view_as(self.layout().permuted(&perm)).contiguous())?
        };
        let rows = kept.iter().map(|&d| self.shape()[d]).product();
        let len = reduced.iter().map(|&d| self.shape()[d]).product();
        let kept_shape: Vec<usize> = (0..rank)
            .map(|d| {
                if reduced.contains(&d) {
                    1
                } else {
                    self.shape()[d]
                }
            })
            .collect();
        let out_shape = if keepdim {
            kept_shape.clone()
        } else {
            kept.iter().map(|&d| self.shape()[d]).collect()
        };
        let reduced = reduced.iter().map(|&d| d as i64).collect();
        Ok(Rows {
            data,
            rows,
            len,
            out_shape,
            kept_shape,
            reduced,
            reduced_first,
        })
    }

    fn sum_impl(&self, dims: Option<Vec<i64>>, keepdim: bool, mean: bool) -> Result<Tensor> {
        if let Some(x) = super::autocast::for_full_precision(self)? {
            return x.sum_impl(dims, keepdim, mean);
        }
        let op = if mean { Op::Mean } else { Op::Sum };
        let _op = self.profiled(op);
        let dtype = self.dtype();
        if mean && !dtype.is_float() {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype,
                hint: "mean needs a float dtype; convert first, e.g. `.to_dtype(DType::F32)?`."
                    .into(),
            });
        }
        // Integers and bools sum in i64 (as in PyTorch); halves accumulate in f32.
        let (compute, out) = match dtype {
            DType::F16 | DType::BF16 => (DType::F32, dtype),
            DType::F32 | DType::F64 => (dtype, dtype),
            _ => (DType::I64, DType::I64),
        };
        let r = no_grad(|| self.to_dtype(compute))?.to_rows(op, dims, keepdim)?;
        let s = if r.reduced_first {
            r.data.storage().sum_cols(r.len, r.rows, mean)?
        } else {
            r.data.storage().sum_rows(r.rows, r.len, mean)?
        };
        let y = no_grad(|| Tensor::from_storage(s, r.out_shape).to_dtype(out))?;
        let (input, kept, count) = (self.shape().to_vec(), r.kept_shape, mean.then_some(r.len));
        Ok(record(y, op, &[self], move || {
            grads::sum(input, kept, count)
        }))
    }

    /// The sum of all elements (a 0-dim tensor). Ints and bools sum to i64.
    pub fn sum_all(&self) -> Result<Tensor> {
        self.sum_impl(None, false, false)
    }

    /// Sums over `dims` (one dim or several); `keepdim` keeps them with size 1.
    pub fn sum(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        self.sum_impl(Some(dims.dims()), keepdim, false)
    }

    /// The mean of all elements (float dtypes).
    pub fn mean_all(&self) -> Result<Tensor> {
        self.sum_impl(None, false, true)
    }

    pub fn mean(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        self.sum_impl(Some(dims.dims()), keepdim, true)
    }

    fn extreme(
        &self,
        op: Op,
        dims: Option<Vec<i64>>,
        keepdim: bool,
        greater: bool,
    ) -> Result<(Tensor, Tensor)> {
        let _op = self.profiled(op);
        let r = self.to_rows(op, dims, keepdim)?;
        // Over an empty dimension there is no extreme (PyTorch refuses too); an empty tensor
        // reduced over non-empty dimensions gives an empty result.
        if r.len == 0 {
            return Err(Error::invalid(
                op,
                format!(
                    "the {} of nothing does not exist: the reduced dimensions of shape {:?} hold no element. Reduce over a non-empty dimension, or check the tensor's size first",
                    if greater {
                        Op::Binary(crate::base::op::BinaryOp::Maximum)
                    } else {
                        Op::Binary(crate::base::op::BinaryOp::Minimum)
                    },
                    self.shape()
                ),
            ));
        }
        let (v, i) = match r.reduced_first {
            true => r.data.storage().extreme_cols(r.len, r.rows, greater)?,
            false => r.data.storage().extreme_rows(r.rows, r.len, greater)?,
        };
        let values = Tensor::from_storage(v, r.out_shape.clone());
        let values_kept = no_grad(|| values.reshape(r.kept_shape.clone()))?;
        let (kept, reduced) = (r.kept_shape, r.reduced);
        let backward = move || grads::extreme(self, &values_kept, kept, reduced);
        Ok((
            record(values, op, &[self], backward),
            Tensor::from_storage(i, r.out_shape),
        ))
    }

    /// The largest element (NaN if any element is NaN).
    pub fn max_all(&self) -> Result<Tensor> {
        Ok(self.extreme(Op::Max, None, false, true)?.0)
    }

    /// The largest elements over `dims` (`torch.amax`).
    pub fn max(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        Ok(self.extreme(Op::Max, Some(dims.dims()), keepdim, true)?.0)
    }

    /// The largest elements along `dim` and their positions (`torch.max(x, dim)`).
    pub fn max_dim(&self, dim: impl Dim, keepdim: bool) -> Result<(Tensor, Tensor)> {
        self.extreme(Op::Max, Some(vec![dim.as_i64()]), keepdim, true)
    }

    pub fn min_all(&self) -> Result<Tensor> {
        Ok(self.extreme(Op::Min, None, false, false)?.0)
    }

    pub fn min(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        Ok(self.extreme(Op::Min, Some(dims.dims()), keepdim, false)?.0)
    }

    pub fn min_dim(&self, dim: impl Dim, keepdim: bool) -> Result<(Tensor, Tensor)> {
        self.extreme(Op::Min, Some(vec![dim.as_i64()]), keepdim, false)
    }

    /// The flat position of the largest element (a 0-dim i64 tensor).
    pub fn argmax_all(&self) -> Result<Tensor> {
        self.arg_extreme(Op::Argmax, None, false, true)
    }

    /// Positions of the largest elements along `dim` (the first one on ties).
    pub fn argmax(&self, dim: impl Dim, keepdim: bool) -> Result<Tensor> {
        self.arg_extreme(Op::Argmax, Some(vec![dim.as_i64()]), keepdim, true)
    }

    pub fn argmin_all(&self) -> Result<Tensor> {
        self.arg_extreme(Op::Argmin, None, false, false)
    }

    pub fn argmin(&self, dim: impl Dim, keepdim: bool) -> Result<Tensor> {
        self.arg_extreme(Op::Argmin, Some(vec![dim.as_i64()]), keepdim, false)
    }

    /// The indices half of `extreme`; bools have no order to search, as in PyTorch.
    fn arg_extreme(
        &self,
        op: Op,
        dims: Option<Vec<i64>>,
        keepdim: bool,
        largest: bool,
    ) -> Result<Tensor> {
        if self.dtype() == DType::Bool {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: DType::Bool,
                hint: "Convert first, e.g. `.to_dtype(DType::U8)?`, or find a true element with `.max(..)`.".into(),
            });
        }
        Ok(self.extreme(op, dims, keepdim, largest)?.1)
    }

    fn softmax_impl(&self, dim: i64, log: bool) -> Result<Tensor> {
        let op = if log { Op::LogSoftmax } else { Op::Softmax };
        let dtype = self.dtype();
        if !dtype.is_float() {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype,
                hint: "Convert first, e.g. `.to_dtype(DType::F32)?`.".into(),
            });
        }
        let rank = self.rank();
        let d = resolve_dim(op.name(), dim, rank)?;
        let compute = if dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        if rank == 0 {
            return self
                .to_dtype(compute)?
                .reshape([1])?
                .softmax_impl(0, log)?
                .reshape(())?
                .to_dtype(dtype);
        }
        // Move `dim` last, work on rows, move it back.
        let mut perm: Vec<usize> = (0..rank).filter(|&k| k != d).collect();
        perm.push(d);
        let x = self.to_dtype(compute)?;
        let rows = x.view_as(x.layout().permuted(&perm)).contiguous()?;
        let s = rows.storage().softmax_rows(self.shape()[d], log)?;
        let out = Tensor::from_storage(s, rows.shape().to_vec());
        let mut inverse = vec![0; rank];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i;
        }
        out.permute(inverse)?.contiguous()?.to_dtype(dtype)
    }

    fn softmax_recorded(&self, dim: i64, log: bool) -> Result<Tensor> {
        let _op = self.profiled(if log { Op::LogSoftmax } else { Op::Softmax });
        if let Some(x) = super::autocast::for_full_precision(self)? {
            return x.softmax_recorded(dim, log);
        }
        let out = no_grad(|| self.softmax_impl(dim, log))?;
        let backward = || grads::softmax(&out, dim, log);
        Ok(record(
            out.clone(),
            if log { Op::LogSoftmax } else { Op::Softmax },
            &[self],
            backward,
        ))
    }

    /// Softmax's (or log-softmax's) gradient in one kernel, from this incoming gradient and the
    /// forward's output `out`, when both are whole contiguous f32/f64 storages of one shape and
    /// `dim` is the last; `None` otherwise (the caller composes it from ops).
    pub(crate) fn softmax_backward_fused(
        &self,
        out: &Tensor,
        dim: i64,
        log: bool,
    ) -> Result<Option<Tensor>> {
        let whole = |t: &Tensor| {
            t.is_contiguous() && t.storage_offset() == 0 && t.storage().numel() == t.numel()
        };
        let fits = self.rank() > 0
            && resolve_dim(Op::Softmax.name(), dim, self.rank())? == self.rank() - 1
            && self.shape() == out.shape()
            && self.dtype() == out.dtype()
            && matches!(self.dtype(), DType::F32 | DType::F64)
            && self.device() == out.device()
            && whole(self)
            && whole(out);
        if !fits {
            return Ok(None);
        }
        let len = self.shape()[self.rank() - 1];
        let s = Storage::softmax_backward_rows(self.storage(), out.storage(), len, log)?;
        Ok(Some(Tensor::from_storage(s, self.shape().to_vec())))
    }

    /// `exp(x) / Σ exp(x)` along `dim`, computed stably (halves in f32).
    pub fn softmax(&self, dim: impl Dim) -> Result<Tensor> {
        self.softmax_recorded(dim.as_i64(), false)
    }

    /// `log(softmax(x))` along `dim`, without the intermediate rounding.
    pub fn log_softmax(&self, dim: impl Dim) -> Result<Tensor> {
        self.softmax_recorded(dim.as_i64(), true)
    }
}
