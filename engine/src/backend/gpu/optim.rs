//! The optimizers' in-place updates on a GPU (`kernels/optim.cu`): every parameter of one dtype
//! in one launch per `LIST_MAX` tensors, as PyTorch's `multi_tensor_apply`.

use super::launch;
use super::ops::{elementwise_grid, tag};
use super::runtime::Gpu;
use super::tensor_list::{LIST_MAX, TensorList};
use crate::base::dtype::DType;
use crate::base::op::Update;
use crate::device::error::Result;

/// One parameter's update: its elements, the device addresses of the parameter, its gradient
/// and its state (0 where the update keeps none), and whether the state is new (unwritten).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub numel: usize,
    pub param: u64,
    pub grad: u64,
    pub state: [u64; 2],
    pub first: bool,
}

/// Updates every slot's parameter in place, `LIST_MAX` at a launch; all have `dtype`, a float.
pub(crate) fn step(g: &Gpu, dtype: DType, update: &Update, slots: &[Slot]) -> Result<()> {
    let bits = f64::to_bits;
    for chunk in slots.chunks(LIST_MAX) {
        let mut list = TensorList::default();
        for s in chunk {
            list.push(s.numel, [s.param, s.grad, s.state[0], s.state[1]], s.first);
        }
        let largest = chunk.iter().map(|s| s.numel).max().unwrap_or(0);
        let (grid, t) = (elementwise_grid(largest), tag(dtype));
        match *update {
            Update::Sgd {
                lr,
                momentum,
                dampening,
                weight_decay,
                nesterov,
            } => launch::sgd_step(
                g,
                t,
                grid,
                "Sgd::step",
                list,
                bits(lr),
                bits(momentum),
                bits(dampening),
                bits(weight_decay),
                nesterov as i32,
            )?,
            Update::Adam {
                lr,
                betas: (b1, b2),
                eps,
                weight_decay,
                decoupled,
                corrections: (c1, c2),
            } => launch::adam_step(
                g,
                t,
                grid,
                "Adam::step",
                list,
                bits(lr),
                bits(b1),
                bits(b2),
                bits(eps),
                bits(weight_decay),
                decoupled as i32,
                bits(c1),
                bits(c2),
            )?,
        }
    }
    Ok(())
}
