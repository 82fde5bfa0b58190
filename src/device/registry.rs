//! The registry of CUDA devices that exist in this process: real GPUs, probed without ever
//! panicking, or stand-ins on host memory, never both. A stand-in is *simulated*
//! (`PLACELAB_SIMULATE_CUDA`, `cuda::simulate`: the CPU kernels, fast, for learners) or
//! *emulated* (`PLACELAB_EMULATE_CUDA`, `cuda::emulate`: the CUDA backend and the real
//! `kernels/*.cu` run on the CPU, for tests). Everything that asks "is there a `cuda:i`, and what
//! backs it?" asks here.

use std::sync::{OnceLock, RwLock};

use super::guard::guarded;
use super::value::{Device, StandIn};
use crate::cost::GpuSpec;
use crate::error::{Error, Result};
use crate::units::parse_bytes;

/// What backs a CUDA device index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Real,
    /// Host memory with a set capacity and the CPU kernels, standing in for a GPU (never in a
    /// benchmark).
    Simulated {
        capacity: usize,
    },
    /// Host memory with a set capacity, run through the CUDA backend with `kernels/*.cu`
    /// compiled for the CPU (never in a benchmark).
    Emulated {
        capacity: usize,
    },
}

/// The capacity of a simulated device when none is given.
pub const DEFAULT_SIMULATED_CAPACITY: usize = 16 << 30;

/// What a CUDA context takes of a GPU's memory before the first tensor (the driver's context,
/// its loaded modules, cuBLAS's handle): a device standing for a named GPU has its memory less
/// this. An assumed figure, about what `nvidia-smi` shows a PyTorch process using on a
/// data-centre GPU before its first tensor.
pub const CONTEXT_RESERVE: usize = 512 << 20;

/// Stand-in CUDA devices: how many, the capacity each pretends to have, which kind, and the
/// named GPU a simulated one stands for (its costs are then predicted beside the host's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Simulation {
    pub(crate) count: usize,
    pub(crate) capacity: usize,
    pub(crate) kind: StandIn,
    pub(crate) stands_for: Option<&'static GpuSpec>,
}

impl Simulation {
    /// `count` simulated devices standing for the GPU named `name`, with its memory less a
    /// context's; an unknown name is an error that lists the known ones.
    pub(crate) fn standing_for(
        count: usize,
        name: &str,
    ) -> std::result::Result<Simulation, String> {
        let gpu = crate::cost::find(name).ok_or_else(|| crate::cost::unknown(name))?;
        Ok(Simulation {
            count,
            capacity: gpu.memory_bytes as usize - CONTEXT_RESERVE,
            kind: StandIn::Simulated,
            stands_for: Some(gpu),
        })
    }
}

/// The setting in `var` (`N` or `N,CAPACITY`), if set and valid; an invalid one is reported.
fn from_env(var: &str, kind: StandIn) -> Option<Simulation> {
    let v = std::env::var(var).ok()?;
    match parse_simulation(&v, kind) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("placelab: ignoring {var}: {e}");
            None
        }
    }
}

fn simulation() -> &'static RwLock<Option<Simulation>> {
    static SIM: OnceLock<RwLock<Option<Simulation>>> = OnceLock::new();
    SIM.get_or_init(|| {
        let simulated = from_env("PLACELAB_SIMULATE_CUDA", StandIn::Simulated);
        let emulated = from_env("PLACELAB_EMULATE_CUDA", StandIn::Emulated);
        if simulated.is_some() && emulated.is_some() {
            eprintln!(
                "placelab: both PLACELAB_SIMULATE_CUDA and PLACELAB_EMULATE_CUDA are set; using the emulated devices"
            );
        }
        RwLock::new(emulated.or(simulated))
    })
}

fn current_simulation() -> Option<Simulation> {
    *simulation().read().unwrap_or_else(|e| e.into_inner())
}

/// Whether simulated devices stand in for CUDA now.
pub(crate) fn is_simulating() -> bool {
    current_simulation().is_some()
}

/// Replaces the simulation setting (`None`: off) once `check` approves the change from the old
/// one. The setting stays locked throughout, so no device is probed against a half-made change;
/// `check` must not probe devices itself.
pub(crate) fn replace_simulation(
    new: Option<Simulation>,
    check: impl FnOnce(Option<Simulation>) -> Result<()>,
) -> Result<()> {
    let mut guard = simulation().write().unwrap_or_else(|e| e.into_inner());
    check(*guard)?;
    *guard = new;
    Ok(())
}

/// Parses `N`, `N,CAPACITY` (`4`, `2,8GiB`, `1,512MiB`, `2,1000000000`) or, for simulated
/// devices, `N,GPU` (`2,h100`).
pub(crate) fn parse_simulation(
    v: &str,
    kind: StandIn,
) -> std::result::Result<Option<Simulation>, String> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(None);
    }
    let (n, cap) = match v.split_once(',') {
        Some((n, c)) => (n.trim(), Some(c.trim())),
        None => (v, None),
    };
    let count: usize = n
        .parse()
        .map_err(|_| format!("{v:?}: expected N or N,CAPACITY such as 2 or 2,8GiB"))?;
    if count == 0 {
        return Ok(None);
    }
    let capacity = match cap {
        Some(c) if kind == StandIn::Simulated && parse_bytes(c).is_none() => {
            return Simulation::standing_for(count, c).map(Some);
        }
        Some(c) => crate::units::parse_size(c)?,
        None => DEFAULT_SIMULATED_CAPACITY,
    };
    Ok(Some(Simulation {
        count,
        capacity,
        kind,
        stands_for: None,
    }))
}

/// The number of real CUDA devices, probed once. Never panics: cudarc panics when libcuda is
/// missing, so the library is looked for first and the rest runs under `catch_unwind`.
fn probe_real() -> &'static std::result::Result<usize, String> {
    static PROBE: OnceLock<std::result::Result<usize, String>> = OnceLock::new();
    PROBE.get_or_init(|| {
        if std::env::var_os("PLACELAB_NO_CUDA").is_some() {
            return Err("PLACELAB_NO_CUDA is set".into());
        }
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err("no NVIDIA driver found (libcuda is not installed)".into());
        }
        match guarded("probing CUDA", cudarc::driver::CudaContext::device_count) {
            Ok(Ok(n)) if n > 0 => Ok(n as usize),
            Ok(Ok(_)) => Err("the NVIDIA driver reports no CUDA device".into()),
            Ok(Err(e)) => Err(format!("the CUDA driver failed to start: {e}")),
            Err(_) => Err(
                "the installed CUDA driver lacks a function this build needs (driver too old?)"
                    .into(),
            ),
        }
    })
}

/// How many real CUDA devices this machine has, whether or not simulation is on (0 without a
/// driver). Probing creates no CUDA context.
pub fn real_device_count() -> usize {
    probe_real().as_ref().copied().unwrap_or(0)
}

/// The CUDA version the installed driver supports, e.g. `(12, 4)` (`cuDriverGetVersion`);
/// `None` without a real GPU.
pub fn driver_version() -> Option<(i32, i32)> {
    if real_device_count() == 0 {
        return None;
    }
    let mut v = 0;
    let status = guarded("asking the driver's version", || unsafe {
        cudarc::driver::sys::cuDriverGetVersion(&mut v)
    })
    .ok()?;
    (status == cudarc::driver::sys::CUresult::CUDA_SUCCESS).then_some((v / 1000, (v % 1000) / 10))
}

/// Why this machine has no real CUDA device, or `None` when it has one.
pub fn no_real_gpu_reason() -> Option<String> {
    probe_real().as_ref().err().cloned()
}

/// Whether any CUDA device (real, or simulated when simulation is on) can be used.
pub fn is_available() -> bool {
    device_count() > 0
}

/// How many `cuda:i` devices there are. With simulation on, the simulated devices replace any
/// real ones, so one process never mixes the two.
pub fn device_count() -> usize {
    match current_simulation() {
        Some(s) => s.count,
        None => real_device_count(),
    }
}

/// Why there is no CUDA device, or `None` when there is one.
pub fn unavailable_reason() -> Option<String> {
    if is_available() {
        return None;
    }
    no_real_gpu_reason().or_else(|| Some("no CUDA device".into()))
}

/// What backs `cuda:index`, or why it does not exist.
pub fn backend(index: usize) -> Result<Backend> {
    let device = Device::Cuda(index);
    if let Some(s) = current_simulation() {
        return if index >= s.count {
            Err(Error::DeviceUnavailable {
                device,
                reason: format!(
                    "there are {} {} CUDA device(s), cuda:0 to cuda:{}",
                    s.count,
                    s.kind.as_str(),
                    s.count - 1
                ),
            })
        } else if s.kind == StandIn::Emulated {
            Ok(Backend::Emulated {
                capacity: s.capacity,
            })
        } else {
            Ok(Backend::Simulated {
                capacity: s.capacity,
            })
        };
    }
    match probe_real() {
        Ok(n) if index < *n => Ok(Backend::Real),
        Ok(n) => Err(Error::DeviceUnavailable {
            device,
            reason: format!(
                "this machine has {n} CUDA device(s), cuda:0 to cuda:{}",
                n - 1
            ),
        }),
        Err(why) => Err(Error::DeviceUnavailable {
            device,
            reason: why.clone(),
        }),
    }
}

/// Whether `device` is a real GPU (its memory is device memory, reached through copies).
pub(crate) fn is_real(device: Device) -> bool {
    match device {
        Device::Cpu => false,
        Device::Cuda(i) => {
            current_simulation().is_none() && matches!(probe_real(), Ok(n) if i < *n)
        }
    }
}

/// Whether `device` runs on the CUDA backend (`gpu/`): a real GPU or an emulated one. Its
/// memory is then reached through the driver's copies, never read in place.
pub(crate) fn uses_gpu_backend(device: Device) -> bool {
    is_real(device) || stand_in(&device) == Some(StandIn::Emulated)
}

/// What stands in for `device`, if it is a simulated or emulated GPU.
pub(crate) fn stand_in(device: &Device) -> Option<StandIn> {
    match device {
        Device::Cpu => None,
        Device::Cuda(i) => current_simulation()
            .filter(|s| *i < s.count)
            .map(|s| s.kind),
    }
}

/// The named GPU a simulated `device` stands for (`--as h100`), if any.
pub fn stands_for(device: &Device) -> Option<&'static GpuSpec> {
    match device {
        Device::Cpu => None,
        Device::Cuda(i) => current_simulation()
            .filter(|s| *i < s.count)
            .and_then(|s| s.stands_for),
    }
}

pub(crate) fn is_simulated(device: &Device) -> bool {
    stand_in(device) == Some(StandIn::Simulated)
}

impl Device {
    /// `cuda:0` when a CUDA device (real or simulated) exists, else the CPU: the PyTorch idiom
    /// `torch.device("cuda" if torch.cuda.is_available() else "cpu")`.
    pub fn cuda_if_available() -> Device {
        if is_available() {
            Device::Cuda(0)
        } else {
            Device::Cpu
        }
    }

    /// True for a CUDA device simulated on host memory (`PLACELAB_SIMULATE_CUDA`).
    pub fn is_simulated(&self) -> bool {
        is_simulated(self)
    }

    /// True for an emulated CUDA device (`PLACELAB_EMULATE_CUDA`): the CUDA backend and its
    /// kernels, run on the CPU.
    pub fn is_emulated(&self) -> bool {
        stand_in(self) == Some(StandIn::Emulated)
    }

    /// What stands in for this device, if it is not a real one (`None` for the CPU and real
    /// GPUs).
    pub fn stand_in(&self) -> Option<StandIn> {
        stand_in(self)
    }

    /// Where host data bound for this device is prepared: the device itself when its memory is
    /// host memory the engine reads in place (the CPU, a simulated GPU), else the CPU.
    pub(crate) fn host_stand_in(&self) -> Device {
        if uses_gpu_backend(*self) {
            Device::Cpu
        } else {
            *self
        }
    }

    /// Checks that the device exists on this machine (a real or simulated GPU with this index).
    pub fn check_available(&self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(i) => backend(*i).map(|_| ()),
        }
    }

    /// The name shown in cards: `cuda:0 (simulated)` for a simulated device, `cuda:0
    /// (emulated)` for an emulated one.
    pub fn label(&self) -> String {
        super::device_label(self, self.stand_in())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_simulation_settings() {
        let sim = StandIn::Simulated;
        assert_eq!(
            parse_simulation("2", sim).unwrap(),
            Some(Simulation {
                count: 2,
                capacity: DEFAULT_SIMULATED_CAPACITY,
                kind: sim,
                stands_for: None,
            })
        );
        assert_eq!(
            parse_simulation("1,512MiB", StandIn::Emulated).unwrap(),
            Some(Simulation {
                count: 1,
                capacity: 512 << 20,
                kind: StandIn::Emulated,
                stands_for: None,
            })
        );
        assert_eq!(parse_simulation("0", sim).unwrap(), None);
        assert!(parse_simulation("two", sim).is_err());
        // A name that is neither a size nor a GPU in the table: the error lists the GPUs.
        let e = parse_simulation("2,lots", sim).unwrap_err();
        assert!(
            e.contains("no GPU named \"lots\"") && e.contains("t4"),
            "{e}"
        );
        // Standing for an A100: its memory less a context's.
        let a100 = parse_simulation("2, A100", sim).unwrap().unwrap();
        assert_eq!(a100.stands_for.map(|g| g.key), Some("a100"));
        assert_eq!(a100.capacity, 81_920 * (1 << 20) - CONTEXT_RESERVE);
        // Emulated devices run the CUDA backend: they stand for no named GPU.
        assert!(parse_simulation("1,h100", StandIn::Emulated).is_err());
    }
}
