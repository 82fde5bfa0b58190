//! Views and layout ops: reshape, transpose, permute, narrow, squeeze/unsqueeze, expand,
//! contiguous; and the copying ones: cat, stack, index_select.

use super::{Tensor, same_device};
use crate::base::dtype::DType;
use crate::base::op::Op;
use crate::device::error::{Error, Result};
use crate::device::layout::{
    Dim, Dims, Layout, broadcast_shapes, numel_checked, resolve_dim, resolve_dims,
};
use crate::storage::{Storage, index_positions};
use crate::tensor::autograd::{Backward, grads, no_grad, record, saved as saved_tensor};

/// A target shape for `reshape`: like a shape, but one entry may be -1 (inferred).
pub trait IntoReshape {
    fn into_reshape(self) -> Vec<i64>;
}
macro_rules! reshape_from {
    ($($t:ty),*) => {$(
        impl<const N: usize> IntoReshape for [$t; N] {
            fn into_reshape(self) -> Vec<i64> { self.iter().map(|&d| d as i64).collect() }
        }
        impl IntoReshape for &[$t] {
            fn into_reshape(self) -> Vec<i64> { self.iter().map(|&d| d as i64).collect() }
        }
        impl IntoReshape for Vec<$t> {
            fn into_reshape(self) -> Vec<i64> { self.iter().map(|&d| d as i64).collect() }
        }
        impl IntoReshape for $t {
            fn into_reshape(self) -> Vec<i64> { vec![self as i64] }
        }
    )*};
}
reshape_from!(i32, i64, usize);
impl IntoReshape for () {
    fn into_reshape(self) -> Vec<i64> {
        vec![]
    }
}

impl Tensor {
    /// The same elements in a new shape (one dim may be -1). A view when the layout allows it
    /// (as `view` would), else a contiguous copy — PyTorch's `reshape`.
    pub fn reshape(&self, shape: impl IntoReshape) -> Result<Tensor> {
        let out = no_grad(|| self.reshape_impl(shape.into_reshape()))?;
        Ok(record(out, Op::Reshape, &[self], || {
            grads::reshape(self.shape().to_vec())
        }))
    }

    fn reshape_impl(&self, spec: Vec<i64>) -> Result<Tensor> {
        let numel = self.numel();
        let known: Vec<usize> = spec
            .iter()
            .filter(|&&d| d >= 0)
            .map(|&d| d as usize)
            .collect();
        let infer = spec.iter().filter(|&&d| d == -1).count();
        if infer > 1 || spec.iter().any(|&d| d < -1) {
            return Err(Error::invalid(
                Op::Reshape,
                format!("{spec:?}: only one dimension may be -1, and no other may be negative"),
            ));
        }
        let known_prod = numel_checked(Op::Reshape, &known)?;
        let shape: Vec<usize> = if infer == 1 {
            if known_prod == 0 || !numel.is_multiple_of(known_prod) {
                return Err(Error::ShapeMismatch {
                    op: Op::Reshape.name(),
                    lhs: self.shape().to_vec(),
                    rhs: known,
                    why: format!("{numel} elements cannot be split into {spec:?}"),
                });
            }
            spec.iter()
                .map(|&d| {
                    if d == -1 {
                        numel / known_prod
                    } else {
                        d as usize
                    }
                })
                .collect()
        } else {
            known
        };
        if numel_checked(Op::Reshape, &shape)? != numel {
            return Err(Error::ShapeMismatch {
                op: Op::Reshape.name(),
                lhs: self.shape().to_vec(),
                rhs: shape.clone(),
                why: format!(
                    "a tensor of {numel} elements cannot be reshaped to {} elements",
                    shape.iter().product::<usize>()
                ),
            });
        }
        if numel == 0 {
            // No element to place: any strides will do, and there is nothing to copy.
            return Ok(self.view_as(Layout {
                offset: self.storage_offset(),
                ..Layout::contiguous(shape)
            }));
        }
        match self.layout().view_strides(&shape) {
            Some(strides) => Ok(self.view_as(Layout {
                shape,
                strides,
                offset: self.storage_offset(),
            })),
            _ => self
                .contiguous()?
                .reshape_impl(shape.iter().map(|&d| d as i64).collect()),
        }
    }

    /// All elements in one dimension.
    pub fn flatten(&self) -> Result<Tensor> {
        self.reshape([-1])
    }

    /// This tensor if it is row-major and gap-free, else a contiguous copy.
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous()
            && self.storage_offset() == 0
            && self.storage().numel() == self.numel()
        {
            return Ok(self.clone());
        }
        self.copy()
    }

    /// A new tensor with its own copy of the data (PyTorch's `x.clone()`; Rust's `clone()` of a
    /// `Tensor` copies only the handle).
    pub fn copy(&self) -> Result<Tensor> {
        let s = self.storage().copy_as(self.layout(), self.dtype())?;
        let out = Tensor::from_storage(s, self.shape().to_vec());
        Ok(record(out, Op::Copy, &[self], grads::identity))
    }

    /// Dimensions reordered: result dim `i` is input dim `dims[i]` (a view).
    pub fn permute(&self, dims: impl Dims) -> Result<Tensor> {
        let dims = dims.dims();
        if dims.len() != self.rank() {
            return Err(Error::invalid(
                Op::Permute,
                format!(
                    "{dims:?} names {} dims but the tensor has {} (shape {:?}); name each dim once",
                    dims.len(),
                    self.rank(),
                    self.shape()
                ),
            ));
        }
        let perm = resolve_dims(Op::Permute.name(), &dims, self.rank())?;
        let out = self.view_as(self.layout().permuted(&perm));
        Ok(record(out, Op::Permute, &[self], move || {
            grads::permute(perm)
        }))
    }

    /// Dims `d0` and `d1` swapped (a view).
    pub fn transpose(&self, d0: impl Dim, d1: impl Dim) -> Result<Tensor> {
        let r = self.rank();
        let (a, b) = (
            resolve_dim(Op::Transpose.name(), d0.as_i64(), r)?,
            resolve_dim(Op::Transpose.name(), d1.as_i64(), r)?,
        );
        if r < 2 {
            return Ok(self.clone());
        }
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(a, b);
        let out = self.view_as(self.layout().permuted(&perm));
        Ok(record(out, Op::Transpose, &[self], move || {
            grads::permute(perm)
        }))
    }

    /// The transpose of a matrix (`x.t()`); 0-D and 1-D tensors come back unchanged.
    pub fn t(&self) -> Result<Tensor> {
        if self.rank() > 2 {
            return Err(Error::invalid(
                "t",
                format!(
                    "t() expects a tensor with at most 2 dims, got shape {:?}; use `transpose(d0, d1)`",
                    self.shape()
                ),
            ));
        }
        self.transpose(0, -1)
    }

    /// `len` elements of dimension `dim` from `start` (a view).
    pub fn narrow(&self, dim: impl Dim, start: usize, len: usize) -> Result<Tensor> {
        if self.rank() == 0 {
            return Err(Error::invalid(
                Op::Narrow,
                "a 0-dimensional tensor has no dimension to narrow; `unsqueeze(0)` it first",
            ));
        }
        let d = resolve_dim(Op::Narrow.name(), dim.as_i64(), self.rank())?;
        let size = self.shape()[d];
        if start.checked_add(len).is_none_or(|end| end > size) {
            return Err(Error::invalid(
                Op::Narrow,
                format!(
                    "start {start} + length {len} exceeds dimension {d} of size {size} (shape {:?})",
                    self.shape()
                ),
            ));
        }
        let mut l = self.layout().clone();
        l.offset += start * l.strides[d];
        l.shape[d] = len;
        let backward = || grads::narrow(self.shape().to_vec(), d, start);
        Ok(record(self.view_as(l), Op::Narrow, &[self], backward))
    }

    /// Removes dimension `dim` if it has size 1 (otherwise returns the tensor unchanged).
    pub fn squeeze(&self, dim: impl Dim) -> Result<Tensor> {
        let d = resolve_dim(Op::Squeeze.name(), dim.as_i64(), self.rank())?;
        if self.rank() == 0 || self.shape()[d] != 1 {
            return Ok(self.clone());
        }
        let mut l = self.layout().clone();
        l.shape.remove(d);
        l.strides.remove(d);
        Ok(record(self.view_as(l), Op::Squeeze, &[self], || {
            grads::reshape(self.shape().to_vec())
        }))
    }

    /// Removes every dimension of size 1.
    pub fn squeeze_all(&self) -> Result<Tensor> {
        let l = self.layout();
        let keep: Vec<usize> = (0..self.rank()).filter(|&i| l.shape[i] != 1).collect();
        let out = self.view_as(Layout {
            shape: keep.iter().map(|&i| l.shape[i]).collect(),
            strides: keep.iter().map(|&i| l.strides[i]).collect(),
            offset: l.offset,
        });
        Ok(record(out, Op::Squeeze, &[self], || {
            grads::reshape(self.shape().to_vec())
        }))
    }

    /// Inserts a dimension of size 1 at `dim` (which may be `rank`, or negative).
    pub fn unsqueeze(&self, dim: impl Dim) -> Result<Tensor> {
        let d = resolve_dim(Op::Unsqueeze.name(), dim.as_i64(), self.rank() + 1)?;
        let mut l = self.layout().clone();
        let stride = if d < l.rank() {
            l.strides[d] * l.shape[d]
        } else {
            1
        };
        l.shape.insert(d, 1);
        l.strides.insert(d, stride);
        Ok(record(self.view_as(l), Op::Unsqueeze, &[self], || {
            grads::reshape(self.shape().to_vec())
        }))
    }

    /// This tensor seen with a larger, broadcast-compatible shape (a view; nothing is copied).
    pub fn broadcast_to(&self, shape: impl crate::device::layout::IntoShape) -> Result<Tensor> {
        let shape = shape.into_shape();
        crate::device::layout::numel_checked(Op::BroadcastTo, &shape)?;
        let b = broadcast_shapes(Op::BroadcastTo, self.shape(), &shape)?;
        if b != shape {
            return Err(Error::ShapeMismatch {
                op: Op::BroadcastTo.name(),
                lhs: self.shape().to_vec(),
                rhs: shape,
                why: "the target must contain the tensor's shape".into(),
            });
        }
        let out = self.view_as(self.layout().broadcast_to(&shape));
        Ok(record(out, Op::BroadcastTo, &[self], || {
            grads::broadcast(self.shape().to_vec())
        }))
    }

    /// Joins tensors along an existing dimension (`torch.cat`). Dtypes are promoted.
    pub fn cat(tensors: &[&Tensor], dim: impl Dim) -> Result<Tensor> {
        let first = *tensors
            .first()
            .ok_or_else(|| Error::invalid(Op::Cat, "needs at least one tensor"))?;
        let names: Vec<String> = (0..tensors.len())
            .map(|i| format!("tensors[{i}]"))
            .collect();
        let args: Vec<(&str, &Tensor)> = names
            .iter()
            .map(|n| n.as_str())
            .zip(tensors.iter().copied())
            .collect();
        let device = same_device(Op::Cat, &args)?;
        let d = resolve_dim(Op::Cat.name(), dim.as_i64(), first.rank())?;
        if first.rank() == 0 {
            return Err(Error::invalid(
                Op::Cat,
                "0-dimensional tensors cannot be concatenated; use `stack`, or `unsqueeze(0)` them first",
            ));
        }
        let mut shape = first.shape().to_vec();
        shape[d] = 0;
        let mut dtype = first.dtype();
        for (i, t) in tensors.iter().enumerate() {
            let same_rest = t.rank() == first.rank()
                && (0..first.rank()).all(|k| k == d || t.shape()[k] == first.shape()[k]);
            if !same_rest {
                return Err(Error::ShapeMismatch {
                    op: Op::Cat.name(),
                    lhs: first.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                    why: format!(
                        "tensors[0] and tensors[{i}] must match in every dimension except {d}, the one joined"
                    ),
                });
            }
            shape[d] += t.shape()[d];
            dtype = DType::promote(dtype, t.dtype());
        }
        let mut out = Storage::alloc(device, dtype, numel_checked(Op::Cat, &shape)?)?;
        let out_layout = Layout::contiguous(shape.clone());
        let mut at = 0;
        for t in tensors {
            let t = no_grad(|| t.to_dtype(dtype))?;
            let mut dst = out_layout.clone();
            dst.offset = at * dst.strides[d];
            dst.shape[d] = t.shape()[d];
            out.write_view(&dst, t.storage(), t.layout())?;
            at += t.shape()[d];
        }
        let sizes = tensors.iter().map(|t| t.shape()[d]).collect();
        Ok(record(
            Tensor::from_storage(out, shape),
            Op::Cat,
            tensors,
            move || grads::cat(sizes, d),
        ))
    }

    /// Joins tensors of one shape along a new dimension (`torch.stack`).
    pub fn stack(tensors: &[&Tensor], dim: impl Dim) -> Result<Tensor> {
        let first = *tensors
            .first()
            .ok_or_else(|| Error::invalid(Op::Stack, "needs at least one tensor"))?;
        let d = resolve_dim(Op::Stack.name(), dim.as_i64(), first.rank() + 1)?;
        for (i, t) in tensors.iter().enumerate() {
            if t.shape() != first.shape() {
                return Err(Error::ShapeMismatch {
                    op: Op::Stack.name(),
                    lhs: first.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                    why: format!("tensors[0] and tensors[{i}] must have the same shape"),
                });
            }
        }
        let parts: Vec<Tensor> = tensors
            .iter()
            .map(|t| t.unsqueeze(d))
            .collect::<Result<_>>()?;
        Tensor::cat(&parts.iter().collect::<Vec<_>>(), d)
    }

    /// The entries of dimension `dim` at `index` (an i64 or i32 tensor of positions).
    pub fn index_select(&self, dim: impl Dim, index: &Tensor) -> Result<Tensor> {
        same_device(Op::IndexSelect, &[("self", self), ("index", index)])?;
        let d = resolve_dim(Op::IndexSelect.name(), dim.as_i64(), self.rank())?;
        if !matches!(index.dtype(), DType::I64 | DType::I32) || index.rank() > 1 {
            return Err(Error::invalid(
                Op::IndexSelect,
                format!(
                    "the index must be a 1-D i64 or i32 tensor, got {} of shape {:?}",
                    index.dtype(),
                    index.shape()
                ),
            ));
        }
        let size = if self.rank() == 0 { 1 } else { self.shape()[d] };
        if self.rank() == 0 {
            positions_of(index, d, size)?;
            return Ok(self.clone());
        }
        // On a GPU the kernel reads the entries where they are and checks them as it runs (a
        // wrong one is reported at the host's next wait): no wait to read them back here.
        let out = (self.storage()).index_select_by(
            self.layout(),
            d,
            (index.storage(), index.layout()),
        )?;
        let mut shape = self.shape().to_vec();
        shape[d] = index.numel();
        let input = self.shape().to_vec();
        // As PyTorch, the backward keeps the index; it reads the entries (on a GPU, a wait) then.
        let backward = || {
            Backward::new(vec![Some(index.detach())], move |g, s| {
                let positions = positions_of(saved_tensor(&s, 0)?, d, size)?;
                Ok(vec![
                    Some(grads::index_select_grad(g, input, d, &positions)?),
                    None,
                ])
            })
        };
        let out = Tensor::from_storage(out, shape);
        Ok(record(out, Op::IndexSelect, &[self, index], backward))
    }

    /// `[n, c]` rows of `dtype` from this i64 tensor of `n` class indices (checked to lie in
    /// `0..c`): at each class −1, or `−g / total_weight` with `scale = [g, total_weight]` (0-d,
    /// f32 or f64, of `dtype` and this device), 0 elsewhere. One op (`one_hot`, or
    /// `nll_loss_backward` with a scale); `op` (the loss) names a wrong index.
    pub(crate) fn class_rows(
        &self,
        c: usize,
        dtype: DType,
        scale: Option<[&Tensor; 2]>,
        op: Op,
    ) -> Result<Tensor> {
        let scale = scale.map(|s| s.map(|t| (t.storage(), t.layout())));
        let rows = (self.storage()).class_rows(self.layout(), c, dtype, scale, op)?;
        Ok(Tensor::from_storage(rows, vec![self.numel(), c]))
    }

    /// `index_select` at positions the host already holds (checked against dimension `d`):
    /// no read of an index tensor, so no wait for a GPU. A data loader's shuffled order.
    pub(crate) fn index_select_host(&self, d: usize, positions: Vec<usize>) -> Result<Tensor> {
        let size = self.shape().get(d).copied().unwrap_or(1);
        if let Some(&p) = positions.iter().find(|&&p| p >= size) {
            return Err(Error::IndexOutOfRange {
                op: Op::IndexSelect.name(),
                index: p as i64,
                dim: d,
                size,
            });
        }
        self.select_positions(d, positions, &[self])
    }

    /// The gather itself, recorded for autograd with `inputs` (`self`, and the index if any).
    fn select_positions(
        &self,
        d: usize,
        positions: Vec<usize>,
        inputs: &[&Tensor],
    ) -> Result<Tensor> {
        let mut shape = self.shape().to_vec();
        shape[d] = positions.len();
        let out = self.storage().index_select(self.layout(), d, &positions)?;
        let input_shape = self.shape().to_vec();
        let backward = move || grads::index_select(input_shape, d, positions);
        Ok(record(
            Tensor::from_storage(out, shape),
            Op::IndexSelect,
            inputs,
            backward,
        ))
    }
}

/// The entries of `index` (i64 or i32) as positions along dim `d` of size `size`, a negative one
/// counting from the end: read on the host, each checked.
fn positions_of(index: &Tensor, d: usize, size: usize) -> Result<Vec<usize>> {
    index_positions(index.values_f64()?, d, size)
}
