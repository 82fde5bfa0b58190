//! A list of tensors passed to one kernel by value (`TensorList` in `kernels/optim.cu`), as
//! PyTorch's `multi_tensor_apply` passes its lists: a kernel over many tensors in one launch.

use cudarc::driver::DeviceRepr;

/// As `LIST_MAX` in `kernels/optim.cu`: tensors per launch.
pub(crate) const LIST_MAX: usize = 24;

/// Up to `LIST_MAX` tensors' addresses, passed to a kernel by value (`TensorList` in
/// `kernels/optim.cu`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TensorList {
    count: u64,
    first: u64,
    numel: [u64; LIST_MAX],
    ptr: [[u64; LIST_MAX]; 4],
}
// SAFETY: a plain `repr(C)` struct of integers, laid out as the kernels' `TensorList`.
unsafe impl DeviceRepr for TensorList {}

impl TensorList {
    /// Adds a tensor of `numel` elements at the four addresses (0 where unused); `first` marks
    /// its state as new. The caller keeps to `LIST_MAX` tensors.
    pub(crate) fn push(&mut self, numel: usize, ptrs: [u64; 4], first: bool) {
        let t = self.count as usize;
        assert!(t < LIST_MAX, "a TensorList holds {LIST_MAX} tensors");
        self.numel[t] = numel as u64;
        self.first |= u64::from(first) << t;
        for (k, p) in ptrs.into_iter().enumerate() {
            self.ptr[k][t] = p;
        }
        self.count += 1;
    }
}
