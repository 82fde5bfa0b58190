//! The `torch.cuda`-style API: `cuda::is_available()`, `device_count()`, `synchronize`,
//! PyTorch's memory functions (`memory_allocated`, `empty_cache`, …), and placelab's own
//! `simulate`/`emulate` switches for stand-in devices. It only gathers what the layers below
//! provide: the device registry, the per-device memory, the CUDA backend (`gpu/`) and the copies
//! still in flight. Changing the stand-ins is `stand_ins.rs`; what `:devices` lists, `devices.rs`.

mod devices;
mod stand_ins;

pub use crate::backend::gpu::blas::{allow_tf32, set_allow_tf32};
pub use crate::backend::gpu::pinned::{HostMemoryStats, pinned_bytes};
pub use crate::backend::gpu::runtime::context_setup_time;
pub use crate::device::cuda_major;
pub use crate::device::registry::{
    DEFAULT_SIMULATED_CAPACITY, ParsedSetting, Simulation, UNUSABLE_ENV, device_count,
    driver_version, is_available, no_real_gpu_reason, parse_emulated, parse_simulated,
    real_device_count, unavailable_reason,
};
pub use crate::storage::stream::{Event, Stream, current_stream, default_stream, with_stream};
pub use devices::{DeviceList, device_name, devices, devices_without_versions, versions_line};

use crate::device::error::{Error, Result};
use crate::device::{Device, DeviceKind};
use crate::memory::{self, caching::MemoryStats};
use stand_ins::{replace_stand_ins, stand_ins};

/// Waits until every kernel and copy queued on `cuda:index` has finished
/// (`torch.cuda.synchronize`): what a benchmark must do before reading a clock, and the point
/// where the non-blocking `.to()` copies from or to the device complete and are timed.
pub fn synchronize(index: usize) -> Result<()> {
    let device = Device::Cuda(index);
    device.check_available()?;
    crate::storage::wait_for_queued_work(device)?;
    crate::transfer::inflight::wait_device(device)
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
    crate::backend::gpu::pinned::stats()
}

/// Gives the pinned host memory that no tensor holds back to the driver; returns the bytes
/// (`torch._C._host_emptyCache()`). `empty_cache()` leaves it, as PyTorch's does.
pub fn host_empty_cache() -> usize {
    crate::backend::gpu::pinned::empty_cache()
}

/// Caps what this process may reserve on `cuda:index` at `fraction` of its memory
/// (`torch.cuda.set_per_process_memory_fraction(fraction, index)`): for learners sharing one
/// GPU, each kernel takes its share and no more. An allocation past the cap releases the cache
/// and then fails as out of memory, naming the cap; other processes are untouched.
/// `PLACELAB_CUDA_MEMORY_FRACTION` sets it for every device from the start (a kernelspec's
/// `--env`).
pub fn set_per_process_memory_fraction(fraction: f64, index: usize) -> Result<()> {
    let device = Device::Cuda(index);
    device.check_available()?;
    memory::set_memory_fraction(&device, fraction)
}

/// The share of `cuda:index`'s memory this process may reserve
/// (`torch.cuda.get_per_process_memory_fraction`): 1 unless capped.
pub fn get_per_process_memory_fraction(index: usize) -> Result<f64> {
    let device = Device::Cuda(index);
    device.check_available()?;
    memory::memory_fraction(&device)
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
