//! The optimizers' in-place updates on a GPU (`kernels/optim.cu`): every parameter of one dtype
//! in one launch per `LIST_MAX` tensors, as PyTorch's `multi_tensor_apply`.

use cudarc::driver::DeviceRepr;

use super::launch;
use super::ops::{elementwise_grid, tag};
use super::runtime::Gpu;
use crate::dtype::DType;
use crate::error::Result;
use crate::op::Update;

/// As `LIST_MAX` in `kernels/optim.cu`: tensors per launch.
pub(crate) const LIST_MAX: usize = 24;

/// Up to `LIST_MAX` tensors' addresses, passed to a kernel by value (`TensorList` in
/// `kernels/optim.cu`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TensorList {
    count: u64,
    first: u64,
    numel: [u64; LIST_MAX],
    ptr: [[u64; LIST_MAX]; 4],
}
// SAFETY: a plain `repr(C)` struct of integers, laid out as the kernels' `TensorList`.
unsafe impl DeviceRepr for TensorList {}

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
        let mut list = TensorList {
            count: chunk.len() as u64,
            first: 0,
            numel: [0; LIST_MAX],
            ptr: [[0; LIST_MAX]; 4],
        };
        for (t, s) in chunk.iter().enumerate() {
            list.numel[t] = s.numel as u64;
            list.first |= u64::from(s.first) << t;
            for (k, p) in [s.param, s.grad, s.state[0], s.state[1]]
                .into_iter()
                .enumerate()
            {
                list.ptr[k][t] = p;
            }
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
