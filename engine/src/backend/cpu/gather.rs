//! Gathers on host memory: `index_select`'s entries copied out of a strided view.

use super::copy_strided;
use crate::device::layout::Layout;

/// The entries `positions` of dimension `dim` of the view `l` of `from`, into the contiguous
/// `out` (the view's shape with `positions.len()` along `dim`), each a strided copy.
pub fn index_select<T: Copy + Send + Sync>(
    from: &[T],
    l: &Layout,
    dim: usize,
    positions: &[usize],
    out: &mut [T],
) {
    let mut shape = l.shape.clone();
    shape[dim] = positions.len();
    let out_layout = Layout::contiguous(shape);
    for (i, &p) in positions.iter().enumerate() {
        let mut dst = out_layout.clone();
        dst.offset = i * dst.strides[dim];
        dst.shape[dim] = 1;
        let mut src = l.clone();
        src.offset += p * src.strides[dim];
        src.shape[dim] = 1;
        copy_strided(from, &src, out, &dst);
    }
}
