//! The small copyable `Device` value: where a tensor lives, and how it prints. What exists on this
//! machine, its `DeviceKind` (`kind.rs`), is asked of the registry (`registry.rs`), which sits
//! above `error`.

use std::fmt;

#[derive(
    Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

impl Device {
    pub fn is_cuda(&self) -> bool {
        matches!(self, Device::Cuda(_))
    }

    pub fn is_cpu(&self) -> bool {
        matches!(self, Device::Cpu)
    }

    /// The index PyTorch reports as `device.index` (`None` for the CPU).
    pub fn index(&self) -> Option<usize> {
        match self {
            Device::Cpu => None,
            Device::Cuda(i) => Some(*i),
        }
    }

    /// The Rust expression that names this device, for fix-it hints.
    pub fn rust_expr(&self) -> String {
        match self {
            Device::Cpu => "Device::Cpu".into(),
            Device::Cuda(i) => format!("Device::Cuda({i})"),
        }
    }
}

/// Prints as PyTorch does: `cpu`, `cuda:0`.
/// Honours width and alignment (`{:>8}`), as a string does: tables line devices up.
impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.pad("cpu"),
            Device::Cuda(i) => f.pad(&format!("cuda:{i}")),
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

impl From<&Device> for Device {
    fn from(d: &Device) -> Self {
        *d
    }
}
