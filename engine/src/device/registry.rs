//! The registry of CUDA devices that exist in this process: real GPUs, probed without ever
//! panicking, or stand-ins on host memory, never both. A stand-in is *simulated*
//! (`PLACELAB_SIMULATE_CUDA`, `cuda::simulate`: the CPU kernels, fast, for learners) or
//! *emulated* (`PLACELAB_EMULATE_CUDA`, `cuda::emulate`: the CUDA backend and the real
//! `kernels/*.cu` run on the CPU, for tests). Everything that asks "is there a `cuda:i`, and what
//! backs it?" asks here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};

use super::guard::guarded;
use super::kind::{DeviceKind, device_label};
use super::value::Device;
use crate::base::units::parse_bytes;
use crate::device::error::{Error, Result};

/// The capacity of a simulated device when none is given.
pub const DEFAULT_SIMULATED_CAPACITY: usize = 16 << 30;

/// What a CUDA context takes of a GPU's memory before the first tensor (the driver's context,
/// its loaded modules, cuBLAS's handle): a device standing for a named GPU has its memory less
/// this. An assumed figure, about what `nvidia-smi` shows a PyTorch process using on a
/// data-centre GPU before its first tensor.
pub const CONTEXT_RESERVE: usize = 512 << 20;

/// Stand-in CUDA devices: how many, and what each is (an emulated or a simulated GPU, with the
/// capacity it pretends to have and the named GPU a simulated one stands for).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Simulation {
    pub count: usize,
    pub each: DeviceKind,
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
            each: DeviceKind::SimulatedGpu {
                capacity: gpu.memory_bytes as usize - CONTEXT_RESERVE,
                stands_for: Some(gpu),
            },
        })
    }
}

/// The setting in `var` (`N` or `N,CAPACITY`), if set and valid; an invalid one is reported.
fn from_env(var: &str, parse: fn(&str) -> ParsedSetting) -> Option<Simulation> {
    let v = std::env::var(var).ok()?;
    match parse(&v) {
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
        let simulated = from_env("PLACELAB_SIMULATE_CUDA", parse_simulated);
        let emulated = from_env("PLACELAB_EMULATE_CUDA", parse_emulated);
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

/// Replaces the simulation setting (`None`: off) once `check` approves the change from the old
/// one. The setting stays locked throughout, so no device is probed against a half-made change;
/// `check` must not probe devices itself.
pub(crate) fn replace_simulation(
    new: Option<Simulation>,
    check: impl FnOnce(Option<Simulation>) -> Result<()>,
) -> Result<()> {
    let mut guard = simulation().write().unwrap_or_else(|e| e.into_inner());
    check(*guard)?;
    if *guard != new {
        *guard = new;
        SETTING.fetch_add(1, Ordering::Release);
    }
    Ok(())
}

/// Which stand-in setting is in force, counted from 0 at every change: state a layer above keeps
/// per device (its memory, its driver) is stamped with it (`Stamped`), so that one atomic load
/// tells whether that state was made, or last checked, under the setting now in force.
pub(super) static SETTING: AtomicU64 = AtomicU64::new(0);

/// The stand-in setting in force now (see `SETTING`). Read it before the device's kind, so that
/// a change between the two leaves a stamp that is checked again.
pub(crate) fn setting() -> u64 {
    SETTING.load(Ordering::Acquire)
}

/// A stand-in setting as read: off (`None`), on, or why it is invalid.
pub type ParsedSetting = std::result::Result<Option<Simulation>, String>;

/// Parses a simulated-devices setting: `N`, `N,CAPACITY` (`4`, `2,8GiB`, `1,512MiB`,
/// `2,1000000000`) or `N,GPU` (`2,h100`).
pub fn parse_simulated(v: &str) -> ParsedSetting {
    let Some((count, word)) = count_and_word(v)? else {
        return Ok(None);
    };
    let capacity = match word {
        Some(w) if parse_bytes(w).is_none() => {
            return Simulation::standing_for(count, w).map(Some);
        }
        w => capacity(w)?,
    };
    let stands_for = None;
    let each = DeviceKind::SimulatedGpu {
        capacity,
        stands_for,
    };
    Ok(Some(Simulation { count, each }))
}

/// Parses an emulated-devices setting: `N` or `N,CAPACITY` (an emulated GPU stands for no named
/// GPU: it runs the CUDA backend on the CPU).
pub fn parse_emulated(v: &str) -> ParsedSetting {
    let Some((count, word)) = count_and_word(v)? else {
        return Ok(None);
    };
    let each = DeviceKind::EmulatedGpu {
        capacity: capacity(word)?,
    };
    Ok(Some(Simulation { count, each }))
}

/// `N` or `N,WORD` read as the count and the word; `None` when the count is 0 or nothing is set.
fn count_and_word(v: &str) -> std::result::Result<Option<(usize, Option<&str>)>, String> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(None);
    }
    let (n, word) = match v.split_once(',') {
        Some((n, w)) => (n.trim(), Some(w.trim())),
        None => (v, None),
    };
    let count: usize = n
        .parse()
        .map_err(|_| format!("{v:?}: expected N or N,CAPACITY such as 2 or 2,8GiB"))?;
    Ok((count > 0).then_some((count, word)))
}

fn capacity(word: Option<&str>) -> std::result::Result<usize, String> {
    word.map_or(
        Ok(DEFAULT_SIMULATED_CAPACITY),
        crate::base::units::parse_size,
    )
}

/// Set by a session for its cell process when the machine has a driver but no CUDA major fits it
/// and its libraries: the reason, which `:devices` and the first GPU use then say.
pub const UNUSABLE_ENV: &str = "PLACELAB_CUDA_UNUSABLE";

/// The number of real CUDA devices, probed once. Never panics: cudarc panics when libcuda is
/// missing, so the library is looked for first and the rest runs under `catch_unwind`.
fn probe_real() -> &'static std::result::Result<usize, String> {
    static PROBE: OnceLock<std::result::Result<usize, String>> = OnceLock::new();
    PROBE.get_or_init(|| {
        if std::env::var_os("PLACELAB_NO_CUDA").is_some() {
            return Err("PLACELAB_NO_CUDA is set".into());
        }
        // The session found, before building this engine, that this machine's driver and
        // libraries allow no CUDA major (the front end's `cuda_choice`): say why, and load none.
        if let Some(why) = std::env::var_os(UNUSABLE_ENV) {
            return Err(why.to_string_lossy().into_owned());
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

impl Device {
    /// What backs this device (`Cpu`, a real `Gpu`, an `EmulatedGpu` or a `SimulatedGpu`), or why
    /// it does not exist on this machine.
    pub fn kind(&self) -> Result<DeviceKind> {
        let index = match self {
            Device::Cpu => return Ok(DeviceKind::Cpu),
            Device::Cuda(i) => *i,
        };
        if let Some(s) = current_simulation() {
            return match index < s.count {
                true => Ok(s.each),
                false => Err(Error::DeviceUnavailable {
                    device: *self,
                    reason: format!(
                        "there are {} {} CUDA device(s), cuda:0 to cuda:{}",
                        s.count,
                        s.each.label_word().unwrap_or("stand-in"),
                        s.count - 1
                    ),
                }),
            };
        }
        match probe_real() {
            Ok(n) if index < *n => Ok(DeviceKind::Gpu),
            Ok(n) => Err(Error::DeviceUnavailable {
                device: *self,
                reason: format!(
                    "this machine has {n} CUDA device(s), cuda:0 to cuda:{}",
                    n - 1
                ),
            }),
            Err(why) => Err(Error::DeviceUnavailable {
                device: *self,
                reason: why.clone(),
            }),
        }
    }

    /// `cuda:0` when a CUDA device (real or simulated) exists, else the CPU: the PyTorch idiom
    /// `torch.device("cuda" if torch.cuda.is_available() else "cpu")`.
    pub fn cuda_if_available() -> Device {
        if is_available() {
            Device::Cuda(0)
        } else {
            Device::Cpu
        }
    }

    /// Where host data bound for this device is prepared: the device itself when its memory is
    /// host memory the engine reads in place (the CPU, a simulated GPU), else the CPU.
    pub(crate) fn host_side(&self) -> Device {
        match self.kind().map(DeviceKind::runs_gpu_backend) {
            Ok(true) => Device::Cpu,
            Ok(false) | Err(_) => *self,
        }
    }

    /// Checks that the device exists on this machine (a real or simulated GPU with this index).
    pub fn check_available(&self) -> Result<()> {
        self.kind().map(|_| ())
    }

    /// The name shown in cards: `cuda:0 (simulated)` for a simulated device, `cuda:0
    /// (emulated)` for an emulated one.
    pub fn label(&self) -> String {
        match self.kind() {
            Ok(kind) => device_label(self, kind),
            Err(_) => self.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_simulation_settings() {
        let simulated = |capacity| DeviceKind::SimulatedGpu {
            capacity,
            stands_for: None,
        };
        assert_eq!(
            parse_simulated("2").unwrap(),
            Some(Simulation {
                count: 2,
                each: simulated(DEFAULT_SIMULATED_CAPACITY),
            })
        );
        assert_eq!(
            parse_emulated("1,512MiB").unwrap(),
            Some(Simulation {
                count: 1,
                each: DeviceKind::EmulatedGpu {
                    capacity: 512 << 20
                },
            })
        );
        assert_eq!(parse_simulated("0").unwrap(), None);
        assert!(parse_simulated("two").is_err());
        // A name that is neither a size nor a GPU in the table: the error lists the GPUs.
        let e = parse_simulated("2,lots").unwrap_err();
        assert!(
            e.contains("no GPU named \"lots\"") && e.contains("t4"),
            "{e}"
        );
        // Standing for an A100: its memory less a context's.
        let a100 = parse_simulated("2, A100").unwrap().unwrap();
        assert_eq!(a100.each.stands_for().map(|g| g.key), Some("a100"));
        assert!(matches!(
            a100.each,
            DeviceKind::SimulatedGpu { capacity, .. } if capacity == 81_920 * (1 << 20) - CONTEXT_RESERVE
        ));
        // Emulated devices run the CUDA backend: they stand for no named GPU.
        assert!(parse_emulated("1,h100").is_err());
    }
}
