//! CUDA devices as the engine sees them: probing the driver without ever panicking, simulated
//! devices for machines without a GPU, and PyTorch's `torch.cuda.*` memory functions.

pub mod blas;
pub mod copy;
pub mod launch;
pub mod libs;
pub mod nvrtc;
pub(crate) mod ops;
pub mod runtime;

pub use blas::{allow_tf32, set_allow_tf32};
pub use copy::pinned_bytes;
pub use runtime::{context_setup_time, synchronize};

use std::sync::{OnceLock, RwLock};

use crate::memory::{self, MemoryStats};
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Simulation {
    count: usize,
    capacity: usize,
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

/// `8GiB`, `8G`, `512MiB`, `512M`, `64KiB`, `1000` (bytes).
pub fn parse_bytes(s: &str) -> Option<usize> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num: f64 = num.parse().ok()?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1u64,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return None,
    };
    let bytes = num * mult as f64;
    (bytes.is_finite() && bytes >= 1.0 && bytes < usize::MAX as f64).then_some(bytes as usize)
}

/// Turns simulated CUDA devices on (`count > 0`) or off (`count == 0`) for this process, as
/// `PLACELAB_SIMULATE_CUDA` does at start-up. Fails while tensors live on a device that would
/// disappear or change size.
pub fn simulate(count: usize, capacity: Option<usize>) -> Result<()> {
    let new = (count > 0).then(|| Simulation {
        count,
        capacity: capacity.unwrap_or(DEFAULT_SIMULATED_CAPACITY),
    });
    let mut guard = simulation().write().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() && new.is_some() {
        // Real GPUs in use: their tensors would be mistaken for a simulated device's.
        for d in memory::used_devices().into_iter().filter(|d| d.is_cuda()) {
            let live = memory::live_storages_if_used(&d);
            let tensors = live.iter().filter(|l| l.is_tensor()).count();
            if tensors > 0 {
                return Err(Error::invalid(
                    "cuda::simulate",
                    format!(
                        "{tensors} tensor storage(s) live on the real GPU {d}; a process never mixes real and simulated CUDA devices. Move them to the CPU (`.cpu()?`) and drop the GPU copies first"
                    ),
                ));
            }
            if let Some(what) = live.iter().find_map(|l| l.engine_buffer) {
                return Err(Error::invalid(
                    "cuda::simulate",
                    format!(
                        "this process has used the real GPU {d}, which still holds the engine's {what}; a process never mixes real and simulated CUDA devices. Start a new session with PLACELAB_SIMULATE_CUDA set to simulate devices"
                    ),
                ));
            }
        }
    }
    if let Some(old) = *guard {
        for i in 0..old.count {
            let keeps = new.is_some_and(|n| i < n.count && n.capacity == old.capacity);
            let d = Device::Cuda(i);
            if !keeps {
                let live = memory::live_storages_if_used(&d).len();
                if live > 0 {
                    return Err(Error::invalid(
                        "cuda::simulate",
                        format!(
                            "{live} tensor storage(s) still live on {d} (simulated); drop them before changing the simulated devices"
                        ),
                    ));
                }
            }
        }
    }
    *guard = new;
    drop(guard);
    memory::forget_simulated_devices();
    Ok(())
}

/// Runs `f`, turning a panic of cudarc's loader (a library that is missing or lacks a symbol)
/// into an error instead of unwinding through the caller.
pub(crate) fn guarded<R>(what: &str, f: impl FnOnce() -> R) -> std::result::Result<R, String> {
    thread_local! {
        static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    // One hook for the whole process, installed once, that stays silent only on a thread inside
    // `guarded`: swapping the process-wide hook per call would race between threads and could
    // leave every later panic silent.
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(|q| q.get()) {
                previous(info);
            }
        }));
    });
    let was_quiet = QUIET.with(|q| q.replace(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was_quiet));
    r.map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("{what}: {msg}")
    })
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

/// `CUDA driver 12.4 · NVRTC 13.0` for `:devices`; `None` where the devices are simulated or
/// there is no real GPU.
pub fn versions_line() -> Option<String> {
    if current_simulation().is_some() {
        return None;
    }
    let (major, minor) = driver_version()?;
    let nvrtc = match nvrtc::version() {
        Ok((a, b)) => format!("NVRTC {a}.{b}"),
        Err(why) => format!("NVRTC unavailable: {why}"),
    };
    Some(format!("CUDA driver {major}.{minor} · {nvrtc}"))
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

/// A human name for `cuda:index`.
pub fn device_name(index: usize) -> Result<String> {
    Ok(match backend(index)? {
        Backend::Simulated { capacity } => {
            format!("on host memory, {}", crate::display::human_bytes(capacity))
        }
        Backend::Real => {
            let name = guarded("naming the GPU", || {
                runtime::gpu(index).and_then(|g| g.ctx.name().map_err(|e| g.err("name", e)))
            });
            match name {
                Ok(Ok(n)) => n,
                _ => "NVIDIA GPU".into(),
            }
        }
    })
}

fn stats_of(index: usize) -> Result<MemoryStats> {
    memory::stats(&Device::Cuda(index))
}

/// Bytes held by live tensors on `cuda:index` (`torch.cuda.memory_allocated`).
pub fn memory_allocated(index: usize) -> Result<usize> {
    Ok(stats_of(index)?.allocated_bytes)
}

/// The peak of `memory_allocated` since start or the last `reset_peak_memory_stats`.
pub fn max_memory_allocated(index: usize) -> Result<usize> {
    Ok(stats_of(index)?.peak_allocated_bytes)
}

/// Bytes held by the caching allocator of `cuda:index` (`torch.cuda.memory_reserved`).
pub fn memory_reserved(index: usize) -> Result<usize> {
    Ok(stats_of(index)?.reserved_bytes)
}

pub fn max_memory_reserved(index: usize) -> Result<usize> {
    Ok(stats_of(index)?.peak_reserved_bytes)
}

/// All counters of `cuda:index` (`torch.cuda.memory_stats`).
pub fn memory_stats(index: usize) -> Result<MemoryStats> {
    stats_of(index)
}

pub fn reset_peak_memory_stats(index: usize) -> Result<()> {
    memory::reset_peak(&Device::Cuda(index))
}

/// Releases the unused cached segments of every CUDA device in use; returns the bytes released.
pub fn empty_cache() -> usize {
    memory::used_devices()
        .iter()
        .filter(|d| d.is_cuda())
        .map(|d| memory::empty_cache(d).unwrap_or(0))
        .sum()
}

/// (free, total) bytes of `cuda:index` as the driver reports them (`torch.cuda.mem_get_info`).
pub fn mem_get_info(index: usize) -> Result<(usize, usize)> {
    memory::mem_get_info(&Device::Cuda(index))
}

/// A table of `cuda:index`'s allocator state (`torch.cuda.memory_summary`).
pub fn memory_summary(index: usize) -> Result<String> {
    memory::memory_summary(&Device::Cuda(index))
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
        assert_eq!(parse_bytes("8GiB"), Some(8 << 30));
        assert_eq!(parse_bytes("1.5G"), Some(3 << 29));
    }
}
