//! The small copyable `Device` value: where a tensor lives. Parsing, display and the
//! availability fallback; what a device can do is asked of `cuda`.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{Error, Result};

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

impl Device {
    /// `cuda:0` when a CUDA device (real or simulated) exists, else the CPU: the PyTorch idiom
    /// `torch.device("cuda" if torch.cuda.is_available() else "cpu")`.
    pub fn cuda_if_available() -> Device {
        if crate::cuda::is_available() {
            Device::Cuda(0)
        } else {
            Device::Cpu
        }
    }

    pub fn is_cuda(&self) -> bool {
        matches!(self, Device::Cuda(_))
    }

    pub fn is_cpu(&self) -> bool {
        matches!(self, Device::Cpu)
    }

    /// True for a CUDA device simulated on host memory (`PLACELAB_SIMULATE_CUDA`).
    pub fn is_simulated(&self) -> bool {
        crate::cuda::is_simulated(self)
    }

    /// Where host data bound for this device is prepared: the device itself when its memory is
    /// host memory (the CPU, a simulated GPU), the CPU for a real GPU.
    pub(crate) fn host_stand_in(&self) -> Device {
        if crate::cuda::is_real(*self) {
            Device::Cpu
        } else {
            *self
        }
    }

    /// The index PyTorch reports as `device.index` (`None` for the CPU).
    pub fn index(&self) -> Option<usize> {
        match self {
            Device::Cpu => None,
            Device::Cuda(i) => Some(*i),
        }
    }

    /// Checks that the device exists on this machine (a real or simulated GPU with this index).
    pub fn check_available(&self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(i) => crate::cuda::backend(*i).map(|_| ()),
        }
    }

    /// The Rust expression that names this device, for fix-it hints.
    pub fn rust_expr(&self) -> String {
        match self {
            Device::Cpu => "Device::Cpu".into(),
            Device::Cuda(i) => format!("Device::Cuda({i})"),
        }
    }

    /// The name shown in cards: `cuda:0 (simulated)` for a simulated device.
    pub fn label(&self) -> String {
        if self.is_simulated() {
            format!("{self} (simulated)")
        } else {
            self.to_string()
        }
    }
}

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

/// Prints as PyTorch does: `cpu`, `cuda:0`.
impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

/// Debug-prints as it displays (`cuda:0`), so a device inside a tuple or a `Vec` shown in a cell
/// reads the same as in a card.
impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Parses `"cpu"`, `"cuda"` (= `cuda:0`) and `"cuda:N"`, ignoring case and surrounding spaces.
impl FromStr for Device {
    type Err = Error;

    fn from_str(s: &str) -> Result<Device> {
        let t = s.trim().to_ascii_lowercase();
        let bad = || Error::DeviceParse {
            input: s.to_string(),
        };
        match t.as_str() {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => {
                let idx = t.strip_prefix("cuda:").ok_or_else(bad)?;
                if idx.is_empty() || !idx.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                idx.parse::<usize>().map(Device::Cuda).map_err(|_| bad())
            }
        }
    }
}

impl From<&Device> for Device {
    fn from(d: &Device) -> Self {
        *d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_like_pytorch() {
        assert_eq!("cpu".parse::<Device>().unwrap(), Device::Cpu);
        assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda(0));
        assert_eq!(" CUDA:1 ".parse::<Device>().unwrap(), Device::Cuda(1));
        assert_eq!(Device::Cuda(3).to_string(), "cuda:3");
        assert_eq!(Device::Cpu.to_string(), "cpu");
        for bad in [
            "", "cuda:", "cuda:-1", "cuda:x", "tpu", "cuda:1:2", "cuda 1",
        ] {
            let e = bad.parse::<Device>().unwrap_err();
            assert!(e.to_string().contains("\"cuda:N\""), "{bad}: {e}");
        }
    }
}
