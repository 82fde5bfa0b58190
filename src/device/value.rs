//! The small copyable `Device` value: where a tensor lives, and how it prints. What exists on this
//! machine is asked of the registry (`registry.rs`), which sits above `error`.

use std::fmt;

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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

/// What stands in for a CUDA device that is not a real GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StandIn {
    /// Host memory and the CPU kernels: fast, for learners (`PLACELAB_SIMULATE_CUDA`).
    Simulated,
    /// Host memory and the CUDA backend, its `kernels/*.cu` compiled for the CPU: for tests
    /// (`PLACELAB_EMULATE_CUDA`).
    Emulated,
}

impl StandIn {
    /// `simulated` or `emulated`.
    pub fn as_str(self) -> &'static str {
        match self {
            StandIn::Simulated => "simulated",
            StandIn::Emulated => "emulated",
        }
    }
}

/// The name shown wherever a device is named for a person: `cuda:0 (simulated)` or `cuda:0
/// (emulated)` for a stand-in, so that no card, strip or table passes one off as a GPU.
pub fn device_label(name: impl fmt::Display, stand_in: Option<StandIn>) -> String {
    match stand_in {
        Some(s) => format!("{name} ({})", s.as_str()),
        None => name.to_string(),
    }
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

impl From<&Device> for Device {
    fn from(d: &Device) -> Self {
        *d
    }
}
