//! The `torch.cuda`-style facade: `cuda::is_available()`, `device_count()`, `simulate`,
//! `synchronize`, and PyTorch's memory functions (`memory_allocated`, `empty_cache`, …). It only
//! gathers what the layers below provide: the device registry, the per-device memory, the CUDA
//! backend (`gpu/`) and the copies still in flight.

pub use crate::device::registry::{
    DEFAULT_SIMULATED_CAPACITY, device_count, driver_version, is_available, no_real_gpu_reason,
    real_device_count, unavailable_reason,
};
// The CUDA backend's modules, under the paths they always had (`placelab::cuda::launch`, …).
pub use crate::gpu::blas::{allow_tf32, set_allow_tf32};
pub use crate::gpu::pinned::{HostMemoryStats, pinned_bytes};
pub use crate::gpu::runtime::context_setup_time;
pub use crate::gpu::{blas, copy, driver, emulated, launch, libs, nvrtc, runtime};
pub use crate::units::parse_bytes;

use crate::device::guard::guarded;
use crate::device::registry::Simulation;
use crate::device::{Device, DeviceKind};
use crate::error::{Error, Result};
use crate::memory::{self, MemoryStats};

/// Waits until every kernel and copy queued on `cuda:index` has finished
/// (`torch.cuda.synchronize`): what a benchmark must do before reading a clock, and the point
/// where the non-blocking `.to()` copies from or to the device complete and are timed.
pub fn synchronize(index: usize) -> Result<()> {
    let device = Device::Cuda(index);
    device.check_available()?;
    crate::storage::wait_for_queued_work(device)?;
    crate::transfer::inflight::wait_device(device)
}

/// A human name for `cuda:index`.
pub fn device_name(index: usize) -> Result<String> {
    let size = crate::units::human_bytes;
    Ok(match Device::Cuda(index).kind()? {
        DeviceKind::SimulatedGpu {
            capacity,
            stands_for: Some(gpu),
        } => format!(
            "standing for {} (its costs predicted), on host memory, {}",
            gpu.with_article(),
            size(capacity)
        ),
        DeviceKind::SimulatedGpu {
            capacity,
            stands_for: None,
        } => format!("on host memory, {}", size(capacity)),
        DeviceKind::EmulatedGpu { capacity } => {
            format!("kernels/*.cu on the CPU, host memory, {}", size(capacity))
        }
        DeviceKind::Gpu => {
            let name = guarded("naming the GPU", || {
                runtime::gpu(index).and_then(|g| g.driver.name().map_err(|e| g.err("name", e)))
            });
            match name {
                Ok(Ok(n)) => n,
                _ => "NVIDIA GPU".into(),
            }
        }
        DeviceKind::Cpu => unreachable!("a CUDA index names no CPU"),
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

/// The pinned host memory cache's figures (`torch.cuda.host_memory_stats()`): bytes held by
/// pinned tensors and page-locked in all, requests served, and the driver's allocations and
/// frees with their time.
pub fn host_memory_stats() -> HostMemoryStats {
    crate::gpu::pinned::stats()
}

/// Gives the pinned host memory that no tensor holds back to the driver; returns the bytes
/// (`torch._C._host_emptyCache()`). `empty_cache()` leaves it, as PyTorch's does.
pub fn host_empty_cache() -> usize {
    crate::gpu::pinned::empty_cache()
}

/// (free, total) bytes of `cuda:index` as the driver reports them (`torch.cuda.mem_get_info`).
pub fn mem_get_info(index: usize) -> Result<(usize, usize)> {
    memory::mem_get_info(&Device::Cuda(index))
}

/// A table of `cuda:index`'s allocator state (`torch.cuda.memory_summary`).
pub fn memory_summary(index: usize) -> Result<String> {
    memory::memory_summary(&Device::Cuda(index))
}

/// Turns simulated CUDA devices on (`count > 0`) or off (`count == 0`) for this process, as
/// `PLACELAB_SIMULATE_CUDA` does at start-up: host memory and the CPU kernels, fast, for
/// learners. Fails while tensors live on a device that would disappear or change.
pub fn simulate(count: usize, capacity: Option<usize>) -> Result<()> {
    let each = DeviceKind::SimulatedGpu {
        capacity: capacity.unwrap_or(DEFAULT_SIMULATED_CAPACITY),
        stands_for: None,
    };
    replace_stand_ins("cuda::simulate", stand_ins(count, each))
}

/// `count` simulated CUDA devices standing for the named GPU (`"h100"`, `"a100"`, `"t4"`, …; as
/// `PLACELAB_SIMULATE_CUDA=2,h100`): its memory less a CUDA context's (`CONTEXT_RESERVE`), and
/// beside every measured host copy, what that GPU would take (predicted, from `cost`). An
/// unknown name is an error listing the known ones.
pub fn simulate_as(count: usize, gpu: &str) -> Result<()> {
    let new = Simulation::standing_for(count, gpu)
        .map_err(|why| Error::invalid("cuda::simulate_as", why))?;
    replace_stand_ins("cuda::simulate", (count > 0).then_some(new))
}

/// Turns emulated CUDA devices on (`count > 0`) or off (`count == 0`) for this process, as
/// `PLACELAB_EMULATE_CUDA` does at start-up: host memory run through the CUDA backend, with the
/// real `kernels/*.cu` compiled for the CPU, so that the GPU code runs without a GPU (slower
/// than simulated devices; for tests). Fails while tensors live on a device that would
/// disappear or change.
pub fn emulate(count: usize, capacity: Option<usize>) -> Result<()> {
    let each = DeviceKind::EmulatedGpu {
        capacity: capacity.unwrap_or(DEFAULT_SIMULATED_CAPACITY),
    };
    replace_stand_ins("cuda::emulate", stand_ins(count, each))
}

/// `count` stand-ins, each `each` (none when 0).
fn stand_ins(count: usize, each: DeviceKind) -> Option<Simulation> {
    (count > 0).then_some(Simulation { count, each })
}

fn replace_stand_ins(op: &'static str, new: Option<Simulation>) -> Result<()> {
    crate::device::registry::replace_simulation(new, |old| {
        if old.is_none() && new.is_some() {
            // Real GPUs in use: their tensors would be mistaken for a simulated device's.
            for d in memory::used_devices().into_iter().filter(|d| d.is_cuda()) {
                let live = memory::live_storages_if_used(&d);
                let tensors = live.iter().filter(|l| l.is_tensor()).count();
                if tensors > 0 {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "{tensors} tensor storage(s) live on the real GPU {d}; a process never mixes real and stand-in CUDA devices. Move them to the CPU (`.cpu()?`) and drop the GPU copies first"
                        ),
                    ));
                }
                if let Some(what) = live.iter().find_map(|l| l.engine_buffer) {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "this process has used the real GPU {d}, which still holds the engine's {what}; a process never mixes real and stand-in CUDA devices. Start a new session with PLACELAB_SIMULATE_CUDA (or PLACELAB_EMULATE_CUDA) set to stand devices in"
                        ),
                    ));
                }
            }
        }
        if let Some(old) = old {
            for i in 0..old.count {
                let d = Device::Cuda(i);
                if !keeps(old, new, i) {
                    // The engine's own buffers (cuBLAS's workspace) go with the device.
                    let live = memory::live_storages_if_used(&d)
                        .iter()
                        .filter(|l| l.is_tensor())
                        .count();
                    if live > 0 {
                        let word = old.each.label_word().unwrap_or("stand-in");
                        return Err(Error::invalid(
                            op,
                            format!(
                                "{live} tensor storage(s) still live on {}; drop them before changing the {word} devices",
                                crate::device::device_label(d, old.each),
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    })?;
    // A device that stays as it was keeps its driver (its stream may still hold queued work)
    // and its memory.
    runtime::forget_stale();
    memory::forget_simulated_devices();
    Ok(())
}

/// Whether stand-in `cuda:i` stays the same device when `old` becomes `new`.
fn keeps(old: Simulation, new: Option<Simulation>, i: usize) -> bool {
    new.is_some_and(|n| i < n.count && n.each == old.each)
}

/// `CUDA driver 12.4 · NVRTC 13.0` for `:devices`; `None` where the devices are simulated or
/// there is no real GPU.
pub fn versions_line() -> Option<String> {
    match Device::Cuda(0).kind() {
        Ok(DeviceKind::Gpu) => {}
        Ok(DeviceKind::Cpu | DeviceKind::EmulatedGpu { .. } | DeviceKind::SimulatedGpu { .. })
        | Err(_) => return None,
    }
    let (major, minor) = driver_version()?;
    let nvrtc = match nvrtc::version() {
        Ok((a, b)) => format!("NVRTC {a}.{b}"),
        Err(why) => format!("NVRTC unavailable: {why}"),
    };
    Some(format!("CUDA driver {major}.{minor} · {nvrtc}"))
}

/// What this process can use, as `:devices`, `placelab devices` and the REPL's banner list it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceList {
    /// `cpu (2 threads)`, then `cuda:0 NVIDIA H100 80GB HBM3 (79.1 GiB free)` or
    /// `cuda:0 (simulated) …` for each CUDA device.
    pub devices: Vec<String>,
    /// The driver's and NVRTC's versions, on a real GPU (`versions_line`).
    pub versions: Option<String>,
    /// Why there is no CUDA device, when there is none.
    pub missing: Option<String>,
    /// Real CUDA devices on this machine, simulated or not.
    pub real: usize,
    /// Emulated CUDA devices this process uses now (`PLACELAB_EMULATE_CUDA`, `cuda::emulate`).
    pub emulated: usize,
    /// Why this machine has no real CUDA device, when it has none.
    pub no_real_gpu: Option<String>,
}

impl DeviceList {
    /// One line each: the devices, the versions, why there is no CUDA device.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = self.devices.clone();
        lines.extend(self.versions.clone());
        lines.extend(
            self.missing
                .iter()
                .map(|why| format!("no CUDA device: {why}")),
        );
        lines
    }
}

/// The devices this process can use now (after any `simulate`). `with_free` asks the driver for
/// each real GPU's free memory, which creates a CUDA context on it: the cell process, which will
/// hold one anyway, or a one-shot command.
pub fn devices(with_free: bool) -> DeviceList {
    let mut devices = vec![format!("cpu ({} threads)", crate::cpu_threads())];
    for i in 0..device_count() {
        let device = Device::Cuda(i);
        let name = device_name(i).unwrap_or_else(|e| e.to_string());
        // A stand-in device's name already gives its capacity; only a real GPU is asked.
        let ask = match device.kind() {
            Ok(DeviceKind::Gpu) => with_free,
            Ok(
                DeviceKind::Cpu | DeviceKind::EmulatedGpu { .. } | DeviceKind::SimulatedGpu { .. },
            )
            | Err(_) => false,
        };
        let free = match ask {
            true => memory::mem_get_info(&device)
                .map(|(f, _)| format!(" ({} free)", crate::units::human_bytes(f)))
                .unwrap_or_default(),
            false => String::new(),
        };
        devices.push(format!("{} {name}{free}", device.label()));
    }
    DeviceList {
        devices,
        versions: versions_line(),
        missing: unavailable_reason(),
        real: real_device_count(),
        emulated: (0..device_count())
            .filter(|&i| matches!(Device::Cuda(i).kind(), Ok(DeviceKind::EmulatedGpu { .. })))
            .count(),
        no_real_gpu: no_real_gpu_reason(),
    }
}
