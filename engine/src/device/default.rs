//! The device tensors land on when their constructor names none (`torch.set_default_device`).

use std::sync::atomic::{AtomicUsize, Ordering};

use super::Device;
use crate::device::error::Result;

/// The default device, encoded: 0 is the CPU, `i + 1` is `cuda:i`.
static DEFAULT_DEVICE: AtomicUsize = AtomicUsize::new(0);

/// Where a tensor made without naming a device lands (`Tensor::new`, `tensor![…]`, or options
/// of `()` or a bare `DType`): the CPU unless `set_default_device` chose another
/// (`torch.get_default_device()`).
pub fn default_device() -> Device {
    match DEFAULT_DEVICE.load(Ordering::Relaxed) {
        0 => Device::Cpu,
        i => Device::Cuda(i - 1),
    }
}

/// Makes `device` the one tensors land on when their constructor names none
/// (`torch.set_default_device`). Tensors made with an explicit device are unaffected, and so are
/// existing tensors. Fails when the device does not exist here.
pub fn set_default_device(device: &Device) -> Result<()> {
    device.check_available()?;
    let code = match device {
        Device::Cpu => 0,
        Device::Cuda(i) => i + 1,
    };
    DEFAULT_DEVICE.store(code, Ordering::Relaxed);
    Ok(())
}
