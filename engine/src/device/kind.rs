//! What a `Device` is on this machine: the one answer to "what is cuda:0?". Every part of the
//! engine that acts on the answer matches a `DeviceKind` exhaustively, so a new kind makes the
//! compiler list each place to change (ARCHITECTURE.md, "to add a device kind").

use crate::cost::GpuSpec;

/// What backs a device. `Device::kind()` (in `registry.rs`) gives it, or says why the device
/// does not exist. The default is the host's, as a memory line with no device (page-locked host
/// memory) has.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub enum DeviceKind {
    /// The host: its memory and the CPU kernels.
    #[default]
    Cpu,
    /// A real NVIDIA GPU, through the driver and the CUDA backend (`gpu/`).
    Gpu,
    /// Host memory with a set capacity, run through the CUDA backend with `kernels/*.cu`
    /// compiled for the CPU (`PLACELAB_EMULATE_CUDA`, `cuda::emulate`): the GPU code path without
    /// a GPU, for tests; it counts launches and allocations as a GPU would.
    EmulatedGpu { capacity: usize },
    /// Host memory with a set capacity and the CPU kernels (`PLACELAB_SIMULATE_CUDA`,
    /// `cuda::simulate`): fast, for learners; standing for a named GPU (`2,h100`), whose costs
    /// are then predicted beside the host's.
    SimulatedGpu {
        capacity: usize,
        #[serde(with = "crate::cost::gpus::by_key")]
        stands_for: Option<&'static GpuSpec>,
    },
}

impl DeviceKind {
    /// The word every label carries after a stand-in's name (`cuda:0 (simulated)`), so that no
    /// card, strip or table passes one off as a GPU; `None` for the CPU and real GPUs.
    pub fn label_word(self) -> Option<&'static str> {
        match self {
            DeviceKind::Cpu | DeviceKind::Gpu => None,
            DeviceKind::EmulatedGpu { .. } => Some("emulated"),
            DeviceKind::SimulatedGpu { .. } => Some("simulated"),
        }
    }

    /// Whether the CUDA backend (`gpu/`) runs the device's work: its memory is then reached only
    /// through the driver's copies, never read in place, and its work is queued on a stream.
    pub fn runs_gpu_backend(self) -> bool {
        match self {
            DeviceKind::Cpu | DeviceKind::SimulatedGpu { .. } => false,
            DeviceKind::Gpu | DeviceKind::EmulatedGpu { .. } => true,
        }
    }

    /// The named GPU a simulated device stands for, whose costs are predicted.
    pub fn stands_for(self) -> Option<&'static GpuSpec> {
        match self {
            DeviceKind::SimulatedGpu { stands_for, .. } => stands_for,
            DeviceKind::Cpu | DeviceKind::Gpu | DeviceKind::EmulatedGpu { .. } => None,
        }
    }
}

/// The name shown wherever a device is named for a person: `cuda:0 (simulated)` or `cuda:0
/// (emulated)` for a stand-in, the name alone otherwise.
pub fn device_label(name: impl std::fmt::Display, kind: DeviceKind) -> String {
    match kind.label_word() {
        Some(word) => format!("{name} ({word})"),
        None => name.to_string(),
    }
}
