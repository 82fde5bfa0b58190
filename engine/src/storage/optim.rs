//! The optimizers' in-place update: every parameter of one device and dtype in one call, on host
//! memory through `cpu::optim`, on a GPU through `gpu::optim` (one launch per 24 tensors).

use half::{bf16, f16};

use super::Storage;
use crate::backend::cpu::optim as host;
use crate::base::dtype::DType;
use crate::base::op::Update;
use crate::device::error::{Error, Result};
use crate::device::layout::Layout;
use crate::profile::Work;

/// One parameter's share of an update: the parameter and its gradient (contiguous views of one
/// length), and its state (whole storages of that length), new and unwritten when `first`.
pub(crate) struct UpdateSlot<'a> {
    pub param: (&'a Storage, &'a Layout),
    pub grad: (&'a Storage, &'a Layout),
    pub state: [Option<&'a Storage>; 2],
    pub first: bool,
}

impl Storage {
    /// Applies `update` to every slot's parameter and state in place. The slots share one device
    /// and one float dtype.
    ///
    /// # Safety
    /// Nothing else reads or writes the parameters' or the states' bytes during the call, and no
    /// gradient shares a parameter's or a state's storage.
    pub(crate) unsafe fn update_in_place(update: &Update, slots: &[UpdateSlot]) -> Result<()> {
        let Some(first) = slots.first() else {
            return Ok(());
        };
        let (device, dtype) = (first.param.0.device(), first.param.0.dtype);
        for s in slots {
            let n = s.param.1.numel();
            let fits = s.param.0.device() == device
                && s.grad.0.device() == device
                && s.param.0.dtype == dtype
                && s.grad.0.dtype == dtype
                && dtype.is_float()
                && s.param.1.is_contiguous()
                && s.grad.1.is_contiguous()
                && s.grad.1.numel() == n
                && (s.state.iter().take(update.state_count())).all(|t| {
                    t.is_some_and(|t| t.numel == n && t.dtype == dtype && t.device() == device)
                });
            if !fits {
                return Err(Error::invalid(
                    update.op().name(),
                    "internal error: an in-place update needs contiguous float parameters, gradients and state of one device and dtype",
                ));
            }
        }
        let numel: usize = slots.iter().map(|s| s.param.1.numel()).sum();
        let _op = first.param.0.profiled(
            update.op(),
            Work::elementwise(numel, 2 + 2 * update.state_count() as u64, dtype),
        );
        if first.param.0.is_host() {
            for s in slots {
                // SAFETY: as this function's contract.
                unsafe { host_update(update, s) };
            }
            return Ok(());
        }
        let g = first.param.0.gpu().expect("a GPU storage")?;
        let elem = dtype.size_in_bytes() as u64;
        let at = |(s, l): (&Storage, &Layout)| s.device_ptr() + l.offset as u64 * elem;
        let gpu_slots: Vec<_> = (slots.iter())
            .map(|s| crate::backend::gpu::optim::Slot {
                numel: s.param.1.numel(),
                param: at(s.param),
                grad: at(s.grad),
                state: s.state.map(|t| t.map_or(0, |t| t.device_ptr())),
                first: s.first,
            })
            .collect();
        crate::backend::gpu::optim::step(&g, dtype, update, &gpu_slots)
    }
}

/// One slot's update on host memory, in the parameter's dtype.
///
/// # Safety
/// As `Storage::update_in_place`.
unsafe fn host_update(update: &Update, s: &UpdateSlot) {
    let n = s.param.1.numel();
    // SAFETY: the views lie inside their storages, which nothing else touches during the call.
    let view =
        |t: &Storage, offset: usize| unsafe { t.host_ptr().add(offset * t.dtype.size_in_bytes()) };
    macro_rules! run {
        ($t:ty, $load:expr, $store:expr) => {{
            let p = view(s.param.0, s.param.1.offset) as *mut $t;
            let g = view(s.grad.0, s.grad.1.offset) as *const $t;
            // SAFETY: as above; the gradient does not share the parameter's storage.
            let (param, grad) = unsafe {
                (
                    std::slice::from_raw_parts_mut(p, n),
                    std::slice::from_raw_parts(g, n),
                )
            };
            let state = s.state.map(|t| {
                t.map(|t| unsafe { std::slice::from_raw_parts_mut(view(t, 0) as *mut $t, n) })
            });
            host::step(update, param, grad, state, s.first, ($load, $store))
        }};
    }
    match s.param.0.dtype {
        DType::F32 => run!(f32, |x| x, |x| x),
        DType::F64 => run!(f64, |x| x, |x| x),
        DType::F16 => run!(f16, f16::to_f32, f16::from_f32),
        DType::BF16 => run!(bf16, bf16::to_f32, bf16::from_f32),
        d => unreachable!("{d} is not a float"),
    }
}
