//! The optimizers' fused in-place updates as a tensor operation: `train/optim.rs` hands its
//! parameters, gradients and state here, and the storage layer runs the update on their backend.

use super::Tensor;
use crate::base::op::Update;
use crate::device::error::Result;
use crate::storage::{Storage, UpdateSlot};

/// One parameter's part of an update: its gradient, the state tensors the update keeps
/// (`Update::state_count` of them), and whether that state is new (written, not read).
pub(crate) struct ParamUpdate<'a> {
    pub param: &'a Tensor,
    pub grad: &'a Tensor,
    pub state: [Option<&'a Tensor>; 2],
    pub first: bool,
}

/// Applies `update` to every parameter and its state in place; they share one device and one
/// float dtype, and each parameter, gradient and state is contiguous.
///
/// # Safety
/// Nothing else reads or writes the parameters' or the states' bytes during the call, and no
/// gradient shares storage with a parameter or a state.
pub(crate) unsafe fn apply_update(update: &Update, params: &[ParamUpdate]) -> Result<()> {
    let slots: Vec<UpdateSlot> = (params.iter())
        .map(|p| UpdateSlot {
            param: (p.param.storage(), p.param.layout()),
            grad: (p.grad.storage(), p.grad.layout()),
            state: p.state.map(|s| s.map(Tensor::storage)),
            first: p.first,
        })
        .collect();
    // SAFETY: the caller's contract is `Storage::update_in_place`'s.
    unsafe { Storage::update_in_place(update, &slots) }
}
