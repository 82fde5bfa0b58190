//! Matrix products: `matmul` with `torch.matmul`'s rules, and `addmm`, a bias plus a product in
//! one GEMM (what `Linear` runs, as PyTorch's `linear` does).

use super::{Tensor, same_device};
use crate::base::dtype::DType;
use crate::base::op::Op;
use crate::device::error::{Error, Result};
use crate::device::layout::{Layout, broadcast_shapes};
use crate::storage::Storage;
use crate::tensor::autograd::{grads, no_grad, record};

impl Tensor {
    /// Matrix product with `torch.matmul`'s rules: 1-D operands are vectors, leading dims are
    /// batch dims and broadcast.
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        let _op = self.profiled(Op::Matmul);
        same_device(Op::Matmul, &[("self", self), ("other", other)])?;
        let (a, b) = (
            super::autocast::for_matmul(self)?,
            super::autocast::for_matmul(other)?,
        );
        if a.is_some() || b.is_some() {
            return a
                .as_ref()
                .unwrap_or(self)
                .matmul(b.as_ref().unwrap_or(other));
        }
        check_gemm_dtypes(Op::Matmul, &[self, other])?;
        let (a, b, (m, k, n)) = as_matrices(self, other)?;
        let (ra, rb) = (a.rank(), b.rank());
        let batch = broadcast_shapes(Op::Matmul, &a.shape()[..ra - 2], &b.shape()[..rb - 2])?;
        let s = batched_product(&a, &b, &batch, (m, k, n))?;
        let mut shape = batch;
        shape.extend([m, n]);
        let out = Tensor::from_storage(s, shape);
        let out = record(out, Op::Matmul, &[&a, &b], || grads::matmul(&a, &b));
        without_vector_dims(out, self.rank(), other.rank())
    }

    /// `self + mat1 · mat2` (`torch.addmm`, β = α = 1) for an `m × k` and a `k × n` matrix, `self`
    /// broadcastable to `m × n` (a bias row): the bias is broadcast into the output and the
    /// product is added onto it by the GEMM itself, so no second `m × n` tensor is made and no
    /// add runs. `Linear` runs through it.
    pub fn addmm(&self, mat1: &Tensor, mat2: &Tensor) -> Result<Tensor> {
        let _op = self.profiled(Op::Addmm);
        let tensors = [("self", self), ("mat1", mat1), ("mat2", mat2)];
        same_device(Op::Addmm, &tensors)?;
        let [c, a, b] = [self, mat1, mat2].map(super::autocast::for_matmul);
        let (c, a, b) = (c?, a?, b?);
        if c.is_some() || a.is_some() || b.is_some() {
            let pick = |cast: Option<Tensor>, t: &Tensor| cast.unwrap_or_else(|| t.clone());
            return pick(c, self).addmm(&pick(a, mat1), &pick(b, mat2));
        }
        check_gemm_dtypes(Op::Addmm, &[self, mat1, mat2])?;
        let (m, k, n) = addmm_dims(self, mat1, mat2)?;
        crate::device::layout::numel_checked(Op::Addmm, &[m, n])?;
        let (a, b) = no_grad(|| Ok::<_, Error>((gemm_ready(mat1)?, gemm_ready(mat2)?)))?;
        let s = self.bias_plus_product(&a, &b, (m, n, k))?;
        let out = Tensor::from_storage(s, vec![m, n]);
        Ok(record(out, Op::Addmm, &[self, mat1, mat2], || {
            grads::addmm(self, mat1, mat2)
        }))
    }

    /// `self`, a bias broadcastable to `m × n`, plus the product of the GEMM-ready `a` and `b`.
    fn bias_plus_product(
        &self,
        a: &Tensor,
        b: &Tensor,
        (m, n, k): (usize, usize, usize),
    ) -> Result<Storage> {
        let (la, lb) = (a.layout(), b.layout());
        let pa = (
            a.storage(),
            &[la.offset][..],
            (la.strides[0], la.strides[1]),
        );
        let pb = (
            b.storage(),
            &[lb.offset][..],
            (lb.strides[0], lb.strides[1]),
        );
        Storage::addmm(pa, pb, (m, n, k), (self.storage(), self.layout()))
    }
}

/// `lhs` and `rhs` as (batches of) matrices, with `(m, k, n)`: a vector on the left is a row
/// (`1 × k`), on the right a column (`k × 1`); an error if either is 0-dimensional or the inner
/// sizes differ.
fn as_matrices(lhs: &Tensor, rhs: &Tensor) -> Result<(Tensor, Tensor, (usize, usize, usize))> {
    if lhs.rank() == 0 || rhs.rank() == 0 {
        return Err(Error::ShapeMismatch {
            op: Op::Matmul.name(),
            lhs: lhs.shape().to_vec(),
            rhs: rhs.shape().to_vec(),
            why: "both operands need at least one dimension; use `mul` for scalars".into(),
        });
    }
    let a = if lhs.rank() == 1 {
        lhs.unsqueeze(0)?
    } else {
        lhs.clone()
    };
    let b = if rhs.rank() == 1 {
        rhs.unsqueeze(1)?
    } else {
        rhs.clone()
    };
    let (ra, rb) = (a.rank(), b.rank());
    let (m, k) = (a.shape()[ra - 2], a.shape()[ra - 1]);
    let (k2, n) = (b.shape()[rb - 2], b.shape()[rb - 1]);
    if k != k2 {
        return Err(Error::ShapeMismatch {
            op: Op::Matmul.name(),
            lhs: lhs.shape().to_vec(),
            rhs: rhs.shape().to_vec(),
            why: format!(
                "a {m}×{k} matrix cannot multiply a {k2}×{n} one: the inner sizes {k} and {k2} must match. Transpose one (`.t()?`) or fix its shape."
            ),
        });
    }
    Ok((a, b, (m, k, n)))
}

/// The storage of `a · b`, each broadcast to the `batch` dims: `batch × m × n`, contiguous.
fn batched_product(
    a: &Tensor,
    b: &Tensor,
    batch: &[usize],
    (m, k, n): (usize, usize, usize),
) -> Result<Storage> {
    // Broadcast views can name more matrices than memory holds: checked before any buffer.
    let batches = crate::device::layout::numel_checked(Op::Matmul, batch)?;
    crate::device::layout::numel_checked(Op::Matmul, &[batches, m, n])?;
    let (a, b) = no_grad(|| Ok::<_, Error>((gemm_ready(a)?, gemm_ready(b)?)))?;
    let full = |t: &Tensor, r: usize, c: usize| {
        let mut shape = batch.to_vec();
        shape.extend([r, c]);
        t.layout().broadcast_to(&shape)
    };
    let (la, lb) = (full(&a, m, k), full(&b, k, n));
    let nb = batch.len();
    let offsets = |l: &Layout| -> Result<Vec<usize>> {
        let bl = Layout {
            shape: batch.to_vec(),
            strides: l.strides[..nb].to_vec(),
            offset: l.offset,
        };
        let mut v = crate::memory::host_vec_with_capacity(Op::Matmul.name(), batches)?;
        v.extend((0..batches).map(|i| bl.offset_of(i)));
        Ok(v)
    };
    let (a_off, b_off) = (offsets(&la)?, offsets(&lb)?);
    Storage::matmul(
        (a.storage(), &a_off, (la.strides[nb], la.strides[nb + 1])),
        (b.storage(), &b_off, (lb.strides[nb], lb.strides[nb + 1])),
        (m, n, k),
        None,
    )
}

/// `torch.matmul`'s result for vector operands: the dim a vector took to be a matrix (of ranks
/// `lhs_rank` and `rhs_rank`) taken out of the product again.
fn without_vector_dims(mut out: Tensor, lhs_rank: usize, rhs_rank: usize) -> Result<Tensor> {
    if rhs_rank == 1 {
        out = out.squeeze(-1)?;
    }
    if lhs_rank == 1 {
        out = out.squeeze(if rhs_rank == 1 { -1 } else { -2 })?;
    }
    Ok(out)
}

/// `(m, k, n)` of `bias + mat1 · mat2`: an error unless both are matrices with matching inner
/// sizes and `bias` broadcasts to `m × n`.
fn addmm_dims(bias: &Tensor, mat1: &Tensor, mat2: &Tensor) -> Result<(usize, usize, usize)> {
    let mismatch = |why: String| Error::ShapeMismatch {
        op: Op::Addmm.name(),
        lhs: mat1.shape().to_vec(),
        rhs: mat2.shape().to_vec(),
        why,
    };
    if mat1.rank() != 2 || mat2.rank() != 2 {
        return Err(mismatch(
            "addmm multiplies two matrices (2-D); for vectors or batches use `mat1.matmul(&mat2)?.add(&bias)?`".into(),
        ));
    }
    let (m, k, n) = (mat1.shape()[0], mat1.shape()[1], mat2.shape()[1]);
    if mat2.shape()[0] != k {
        return Err(mismatch(format!(
            "a {m}×{k} matrix cannot multiply a {}×{n} one: the inner sizes must match",
            mat2.shape()[0]
        )));
    }
    if broadcast_shapes(Op::Addmm, bias.shape(), &[m, n])
        .ok()
        .as_deref()
        != Some(&[m, n][..])
    {
        return Err(Error::ShapeMismatch {
            op: Op::Addmm.name(),
            lhs: bias.shape().to_vec(),
            rhs: vec![m, n],
            why: format!(
                "the added tensor must broadcast to the product's shape [{m}, {n}] (a bias of {n}, or a [{m}, {n}] matrix)"
            ),
        });
    }
    Ok((m, k, n))
}

/// The operands of a GEMM share one dtype, and one that the device multiplies (cuBLAS takes
/// floats only; simulated GPUs refuse what cuBLAS refuses, so a lesson behaves the same on both).
fn check_gemm_dtypes(op: Op, operands: &[&Tensor]) -> Result<()> {
    let first = operands[0];
    let dtype = first.dtype();
    if let Some(other) = operands.iter().find(|t| t.dtype() != dtype) {
        return Err(Error::DTypeMismatch {
            op: op.name(),
            lhs: dtype,
            rhs: other.dtype(),
            hint: format!(
                "{op} needs all its operands of one dtype; convert one, e.g. `other.to_dtype(DType::{})?`.",
                dtype.variant_name()
            ),
        });
    }
    if dtype == DType::Bool {
        return Err(Error::UnsupportedDType {
            op: op.name(),
            dtype,
            hint: "Convert to a numeric dtype first.".into(),
        });
    }
    Storage::check_matmul_dtype(first.device(), dtype)
}

/// `t` as a GEMM operand: cuBLAS needs a unit stride in one of the two matrix dims (a broadcast
/// or strided view gets a contiguous copy); the CPU's GEMM takes any strides.
fn gemm_ready(t: &Tensor) -> Result<Tensor> {
    let r = t.rank();
    let (rows, cols) = (t.shape()[r - 2], t.shape()[r - 1]);
    let (rs, cs) = (t.layout().strides[r - 2], t.layout().strides[r - 1]);
    if t.storage().matmul_reads_in_place(rows, cols, rs, cs) {
        Ok(t.clone())
    } else {
        t.contiguous()
    }
}
