//! A view as the kernels read it: the `Strided` struct of `kernels/common.cuh`, built on the host
//! from layouts (dims merged where they can be) and passed to a kernel by value.

use cudarc::driver::DeviceRepr;

use crate::base::op::Op;
use crate::device::error::{Error, Result};
use crate::device::layout::{Layout, coalesce};

/// As `MAX_DIMS` in `kernels/common.cuh`.
pub(crate) const MAX_DIMS: usize = 8;

/// A view as the kernels read it (`Strided` in `kernels/common.cuh`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Strided {
    offset: u64,
    rank: u64,
    shape: [u64; MAX_DIMS],
    strides: [u64; MAX_DIMS],
}
// SAFETY: a plain `repr(C)` struct of integers, laid out as the kernels' `Strided`.
unsafe impl DeviceRepr for Strided {}

/// The kernels' views of `layouts` (one shape), with mergeable dims merged.
pub(crate) fn views(op: Op, layouts: &[&Layout]) -> Result<Vec<Strided>> {
    let (shape, strides) = coalesce(layouts);
    layouts
        .iter()
        .zip(strides)
        .map(|(l, st)| strided(op, l.offset, &shape, &st))
        .collect()
}

/// A view of `shape` and `strides` from element `offset`, refused past `MAX_DIMS` dims.
pub(crate) fn strided(
    op: Op,
    offset: usize,
    shape: &[usize],
    strides: &[usize],
) -> Result<Strided> {
    if shape.len() > MAX_DIMS {
        return Err(Error::invalid(
            op,
            format!(
                "on CUDA a tensor view may have at most {MAX_DIMS} dims that cannot be merged, this one has {}; reshape the tensor to fewer dims first",
                shape.len()
            ),
        ));
    }
    let mut v = Strided {
        offset: offset as u64,
        rank: shape.len() as u64,
        shape: [0; MAX_DIMS],
        strides: [0; MAX_DIMS],
    };
    for d in 0..shape.len() {
        v.shape[d] = shape[d] as u64;
        v.strides[d] = strides[d] as u64;
    }
    Ok(v)
}
