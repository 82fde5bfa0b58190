//! The registry of CUDA devices that exist in this process: real GPUs, probed without ever
//! panicking, or simulated ones on host memory (`PLACELAB_SIMULATE_CUDA`, `cuda::simulate`),
//! never both. Everything that asks "is there a `cuda:i`, and what backs it?" asks here.

use std::sync::{OnceLock, RwLock};

use super::guard::guarded;
use crate::units::parse_bytes;
use crate::{Device, Error, Result};

/// What backs a CUDA device index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Real,
    /// Host memory with a set capacity, standing in for a GPU (never in a benchmark).
    Simulated {
        capacity: usize,
    },
}

/// The capacity of a simulated device when none is given.
pub const DEFAULT_SIMULATED_CAPACITY: usize = 16 << 30;

/// Simulated CUDA devices: how many, and the capacity each pretends to have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Simulation {
    pub(crate) count: usize,
    pub(crate) capacity: usize,
}

fn simulation() -> &'static RwLock<Option<Simulation>> {
    static SIM: OnceLock<RwLock<Option<Simulation>>> = OnceLock::new();
    SIM.get_or_init(|| {
        let from_env =
            std::env::var("PLACELAB_SIMULATE_CUDA")
                .ok()
                .and_then(|v| match parse_simulation(&v) {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("placelab: ignoring PLACELAB_SIMULATE_CUDA: {e}");
                        None
                    }
                });
        RwLock::new(from_env)
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

/// Parses `N` or `N,CAPACITY` (`4`, `2,8GiB`, `1,512MiB`, `2,1000000000`).
fn parse_simulation(v: &str) -> std::result::Result<Option<Simulation>, String> {
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
        Some(c) => parse_bytes(c).ok_or_else(|| {
            format!("{c:?} is not a size; write e.g. 8GiB, 512MiB or a byte count")
        })?,
        None => DEFAULT_SIMULATED_CAPACITY,
    };
    Ok(Some(Simulation { count, capacity }))
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
        return if index < s.count {
            Ok(Backend::Simulated {
                capacity: s.capacity,
            })
        } else {
            Err(Error::DeviceUnavailable {
                device,
                reason: format!(
                    "there are {} simulated CUDA device(s), cuda:0 to cuda:{}",
                    s.count,
                    s.count - 1
                ),
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

pub(crate) fn is_simulated(device: &Device) -> bool {
    match device {
        Device::Cpu => false,
        Device::Cuda(i) => current_simulation().is_some_and(|s| *i < s.count),
    }
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

    /// Where host data bound for this device is prepared: the device itself when its memory is
    /// host memory (the CPU, a simulated GPU), the CPU for a real GPU.
    pub(crate) fn host_stand_in(&self) -> Device {
        if is_real(*self) { Device::Cpu } else { *self }
    }

    /// Checks that the device exists on this machine (a real or simulated GPU with this index).
    pub fn check_available(&self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(i) => backend(*i).map(|_| ()),
        }
    }

    /// The name shown in cards: `cuda:0 (simulated)` for a simulated device.
    pub fn label(&self) -> String {
        super::device_label(self, self.is_simulated())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_simulation_settings() {
        assert_eq!(
            parse_simulation("2").unwrap(),
            Some(Simulation {
                count: 2,
                capacity: DEFAULT_SIMULATED_CAPACITY
            })
        );
        assert_eq!(
            parse_simulation("1,512MiB").unwrap(),
            Some(Simulation {
                count: 1,
                capacity: 512 << 20
            })
        );
        assert_eq!(parse_simulation("0").unwrap(), None);
        assert!(parse_simulation("two").is_err());
        assert!(parse_simulation("2,lots").is_err());
    }
}
