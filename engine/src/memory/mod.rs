//! Per-device memory: one caching allocator per device, the ledger of live tensor storages, and
//! the stats functions (`memory_allocated`, `memory_reserved`, `empty_cache`, …).
//!
//! Process-global on purpose: every tensor of a device, in every REPL cell, draws on the same
//! pool, exactly as in PyTorch.

pub mod idle;
mod summary;

// The allocator's policy and raw host memory, under the paths they always had.
pub use crate::backend::alloc::{caching, host};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::base::dtype::DType;
use crate::device::current_stream::{DEFAULT_STREAM, StreamId, current};
use crate::device::error::{Error, Result};
use crate::device::per_device::PerDevice;
use crate::device::{Device, DeviceKind};
use caching::MemoryStats;
use caching::{CachingAllocator, RawAllocator};
pub use summary::memory_summary;

/// One live tensor storage, as the ledger records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveStorage {
    pub id: u64,
    pub dtype: DType,
    pub numel: usize,
    /// Bytes the tensor needs (`numel × dtype size`).
    pub requested: usize,
    /// Bytes of the block it holds (rounded up by the allocator).
    pub bytes: usize,
    /// What holds the block when it is not a tensor: the engine's own buffers, such as the
    /// cuBLAS workspace, which PyTorch also counts in `memory_allocated`.
    pub engine_buffer: Option<&'static str>,
}

impl LiveStorage {
    pub fn is_tensor(&self) -> bool {
        self.engine_buffer.is_none()
    }
}

pub(crate) struct DeviceMemory {
    alloc: CachingAllocator,
    live: BTreeMap<u64, LiveStorage>,
    /// The share of the device this process may reserve (`set_memory_fraction`), as given.
    fraction: Option<f64>,
}

type Shared = Arc<Mutex<DeviceMemory>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere never makes memory accounting unusable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Each used device's memory, made again once the stand-ins made the device another.
static MEMORY: PerDevice<Device, Shared> = PerDevice::new();

fn raw_allocator_for(device: Device, kind: DeviceKind) -> Result<Box<dyn RawAllocator>> {
    Ok(match (device, kind) {
        (_, DeviceKind::Cpu) => Box::new(host::HostMemory::cpu()),
        (_, DeviceKind::SimulatedGpu { capacity, .. }) => {
            Box::new(host::HostMemory::simulated(capacity))
        }
        (Device::Cuda(i), DeviceKind::Gpu | DeviceKind::EmulatedGpu { .. }) => {
            Box::new(crate::backend::gpu::runtime::CudaMemory::new(i)?)
        }
        (Device::Cpu, _) => unreachable!("the CPU is of kind Cpu"),
    })
}

/// The memory of `device`, created on first use, and again after a change of the stand-ins made
/// the device another. Fails for devices that do not exist.
pub(crate) fn device_memory(device: Device) -> Result<Shared> {
    // A replaced allocator is dropped outside the lock: giving its segments back may ask for
    // the device.
    MEMORY.get_or_make(device, device, |kind| new_memory(device, kind), drop)
}

/// A new caching allocator for `device`, of `kind`, under the process's cap on a CUDA device.
fn new_memory(device: Device, kind: DeviceKind) -> Result<Shared> {
    let raw = raw_allocator_for(device, kind)?;
    let fraction = match device.is_cuda() {
        true => {
            static IDLE: OnceLock<Result<()>> = OnceLock::new();
            IDLE.get_or_init(|| idle::from_env(release_idle_caches))
                .clone()?;
            fraction_from_env()?
        }
        false => None,
    };
    let mut alloc = CachingAllocator::new(raw);
    alloc.set_limit(fraction.map(|f| cap_bytes(f, alloc.mem_info().1)));
    Ok(Arc::new(Mutex::new(DeviceMemory {
        alloc,
        live: BTreeMap::new(),
        fraction,
    })))
}

/// Gives every CUDA device's cached free segments back once this process has made and freed no
/// block for `after` (`None`: never), as `PLACELAB_IDLE_EMPTY_CACHE` does; each release is kept
/// for the next cell's strip (`idle::releases_since`).
pub fn set_idle_release(after: Option<std::time::Duration>) {
    idle::set(after, release_idle_caches);
}

/// `empty_cache` on every CUDA device whose cache holds free memory: those that gave some back.
fn release_idle_caches() -> Vec<(Device, u64)> {
    let held =
        |d: &Device| stats(d).map_or(0, |s| s.reserved_bytes.saturating_sub(s.allocated_bytes));
    (used_devices().into_iter())
        .filter(|d| d.is_cuda() && held(d) > 0)
        .filter_map(|d| Some((d, empty_cache(&d).ok().filter(|b| *b > 0)? as u64)))
        .collect()
}

/// The variable that caps every CUDA device's memory for this process, as a fraction of each
/// (a class's kernelspec sets it: `--env PLACELAB_CUDA_MEMORY_FRACTION=0.1`).
pub const MEMORY_FRACTION_VAR: &str = "PLACELAB_CUDA_MEMORY_FRACTION";

/// `fraction` if it is one (0 to 1), else an error that says where it came from (`what`).
pub(crate) fn check_fraction(fraction: f64, what: &str) -> Result<f64> {
    if (0.0..=1.0).contains(&fraction) {
        return Ok(fraction);
    }
    Err(Error::InvalidArgument {
        op: "set_per_process_memory_fraction",
        msg: format!(
            "{what} is {fraction}: give a fraction of the device's memory from 0 to 1 (0.25 lets this process reserve a quarter of it), as PyTorch's set_per_process_memory_fraction takes"
        ),
    })
}

fn fraction_from_env() -> Result<Option<f64>> {
    let Ok(text) = std::env::var(MEMORY_FRACTION_VAR) else {
        return Ok(None);
    };
    let what = format!("{MEMORY_FRACTION_VAR}={text:?}");
    let fraction = text
        .trim()
        .parse::<f64>()
        .map_err(|_| Error::InvalidArgument {
            op: "set_per_process_memory_fraction",
            msg: format!("{what} is not a number: give a fraction from 0 to 1, such as 0.1"),
        })?;
    check_fraction(fraction, &what).map(Some)
}

/// `fraction` of `total` bytes, rounded down (PyTorch's `allowed_memory_maximum`).
fn cap_bytes(fraction: f64, total: usize) -> usize {
    (fraction * total as f64) as usize
}

/// Caps the bytes this process may reserve on `device` at `fraction` of its memory
/// (`cuda::set_per_process_memory_fraction`).
pub(crate) fn set_memory_fraction(device: &Device, fraction: f64) -> Result<()> {
    let fraction = check_fraction(fraction, "the fraction")?;
    let mem = device_memory(*device)?;
    let mut m = lock(&mem);
    let total = m.alloc.mem_info().1;
    m.alloc.set_limit(Some(cap_bytes(fraction, total)));
    m.fraction = Some(fraction);
    Ok(())
}

/// The share of `device`'s memory this process may reserve: 1 unless capped.
pub(crate) fn memory_fraction(device: &Device) -> Result<f64> {
    let mem = device_memory(*device)?;
    Ok(lock(&mem).fraction.unwrap_or(1.0))
}

/// A block of device memory held by one tensor storage; dropping it returns the block to the
/// device's cache: at once, or once the other streams that used it (`record_stream`) are done
/// with the work they had queued.
pub(crate) struct Block {
    addr: usize,
    size: usize,
    id: u64,
    device: Device,
    mem: Shared,
    /// The stream it was allocated on, whose pool it returns to.
    stream: StreamId,
    /// Other streams that use it (`record_stream`).
    uses: Mutex<Vec<StreamId>>,
}

impl Block {
    pub(crate) fn alloc(device: Device, dtype: DType, numel: usize) -> Result<Block> {
        Block::alloc_for(device, dtype, numel, None)
    }

    /// A block for one of the engine's own buffers (`what` names it in summaries), not a tensor.
    pub(crate) fn alloc_engine_buffer(
        device: Device,
        bytes: usize,
        what: &'static str,
    ) -> Result<Block> {
        Block::alloc_for(device, DType::U8, bytes, Some(what))
    }

    fn alloc_for(
        device: Device,
        dtype: DType,
        numel: usize,
        engine_buffer: Option<&'static str>,
    ) -> Result<Block> {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        // Every op that makes a tensor comes through here: the place an interrupt stops a cell.
        crate::device::interrupt::check()?;
        let requested = numel
            .checked_mul(dtype.size_in_bytes())
            .filter(|b| *b <= isize::MAX as usize)
            .ok_or(Error::SizeOverflow {
                op: "allocate",
                shape: vec![numel],
            })?;
        let mem = device_memory(device)?;
        // The engine's buffers (cuBLAS's workspace) serve the default stream's work alone.
        let stream = match engine_buffer {
            Some(_) => DEFAULT_STREAM,
            None => current(device),
        };
        let mut m = lock(&mem);
        idle::touch();
        let (addr, size) = m
            .alloc
            .malloc_on(requested, stream)
            .map_err(|oom| match oom.driver_error {
                Some(msg) => Error::Cuda {
                    op: "allocate",
                    device,
                    msg: format!(
                        "the driver failed to allocate {} ({msg}). This usually means an earlier GPU operation failed and left the device unusable in this process; restart the session (REPL or kernel) to get a fresh one",
                        crate::base::units::human_bytes(requested)
                    ),
                },
                None => Error::OutOfMemory {
                    device,
                    requested: oom.requested,
                    free: oom.free,
                    total: oom.total,
                    allocated: oom.allocated,
                    reserved: oom.reserved,
                    allowed: oom.allowed,
                },
            })?;
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        m.live.insert(
            id,
            LiveStorage {
                id,
                dtype,
                numel,
                requested,
                bytes: size,
                engine_buffer,
            },
        );
        let allocated = crate::profile::recording().then(|| m.alloc.allocated_bytes());
        drop(m);
        if let Some(allocated) = allocated {
            crate::profile::block_allocated(
                device,
                (id, size),
                (dtype, numel),
                engine_buffer,
                allocated,
            );
        }
        Ok(Block {
            addr,
            size,
            id,
            device,
            mem,
            stream,
            uses: Mutex::default(),
        })
    }

    /// Marks the block as used by `stream`'s work too (`Tensor::record_stream`): once freed, it
    /// is reused only after the work `stream` has queued by then is done. Its own stream needs
    /// no mark: its order keeps the uses apart.
    pub(crate) fn record_stream(&self, stream: StreamId) {
        let mut uses = lock(&self.uses);
        if stream != self.stream && !uses.contains(&stream) {
            uses.push(stream);
        }
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        if self.addr == 0 {
            std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut u8
        } else {
            self.addr as *mut u8
        }
    }

    /// The rounded size of the block (what `memory_allocated` counts).
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn device(&self) -> Device {
        self.device
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        let uses = std::mem::take(self.uses.get_mut().unwrap_or_else(|e| e.into_inner()));
        let pending = match (self.device, uses.is_empty()) {
            (Device::Cuda(i), false) => stream_uses_done(self.device, i, &uses),
            _ => Vec::new(),
        };
        let mut m = lock(&self.mem);
        idle::touch();
        m.alloc.free_after(self.addr, pending);
        m.live.remove(&self.id);
        let allocated = crate::profile::recording().then(|| m.alloc.allocated_bytes());
        drop(m);
        if let Some(allocated) = allocated {
            crate::profile::block_freed(self.device, (self.id, self.size), allocated);
        }
    }
}

/// What a block's other streams have queued by now, for `free_after`: on a GPU (real or
/// emulated) an event on each; a simulated device has run their work already.
fn stream_uses_done(
    device: Device,
    index: usize,
    uses: &[StreamId],
) -> Vec<Box<dyn caching::PendingUse>> {
    if !device.kind().is_ok_and(DeviceKind::runs_gpu_backend) {
        return Vec::new();
    }
    match crate::backend::gpu::runtime::gpu(index) {
        Ok(g) => g.work_queued_on(uses),
        Err(_) => Vec::new(), // the device is gone, and its work with it
    }
}

/// The live storages of `device` if it has an allocator, without creating one (no device
/// probing, so it is safe to call while the simulation setting is locked).
pub(crate) fn live_storages_if_used(device: &Device) -> Vec<LiveStorage> {
    let mem = MEMORY.get(device);
    mem.map(|m| lock(&m).live.values().cloned().collect())
        .unwrap_or_default()
}

fn with_memory<R>(device: &Device, f: impl FnOnce(&mut DeviceMemory) -> R) -> Result<R> {
    let mem = device_memory(*device)?;
    let mut m = lock(&mem);
    Ok(f(&mut m))
}

/// The allocator's counters for `device` (all zero for a device not used yet).
pub fn stats(device: &Device) -> Result<MemoryStats> {
    with_memory(device, |m| m.alloc.stats())
}

/// Bytes held by live tensors on `device` (`torch.cuda.memory_allocated`).
pub fn allocated(device: &Device) -> Result<usize> {
    Ok(stats(device)?.allocated_bytes)
}

/// Bytes held by the cache of `device`, used or not (`torch.cuda.memory_reserved`).
pub fn reserved(device: &Device) -> Result<usize> {
    Ok(stats(device)?.reserved_bytes)
}

/// Returns the wholly free cached segments of `device` to the system; returns the bytes freed.
pub fn empty_cache(device: &Device) -> Result<usize> {
    with_memory(device, |m| m.alloc.empty_cache())
}

/// Sets the peak counters of `device` to their current values.
pub fn reset_peak(device: &Device) -> Result<()> {
    with_memory(device, |m| m.alloc.reset_peak())
}

/// (free, total) bytes of `device` as its driver (or the OS, for the CPU) reports them.
pub fn mem_get_info(device: &Device) -> Result<(usize, usize)> {
    with_memory(device, |m| m.alloc.mem_info())
}

/// The live tensor storages on `device`, oldest first.
pub fn live_storages(device: &Device) -> Result<Vec<LiveStorage>> {
    with_memory(device, |m| m.live.values().cloned().collect())
}

/// Devices whose memory has been used in this process, CPU first.
pub fn used_devices() -> Vec<Device> {
    let mut v: Vec<Device> = MEMORY.keys();
    v.sort();
    v
}

/// Drops the allocators of CUDA devices that hold no tensor, so that a new simulation setting
/// (count, capacity) takes effect for them.
pub(crate) fn forget_simulated_devices() {
    let tensors = |m: &Shared| lock(m).live.values().any(|l| l.is_tensor());
    let gone = MEMORY.retain(|d, m| d.is_cpu() || tensors(m));
    drop(gone); // outside the lock: giving segments back may ask for the device
}

/// Each segment of `device`: (address, size, blocks as (offset, size, allocated)).
pub fn segments(device: &Device) -> Result<Vec<caching::Segment>> {
    with_memory(device, |m| m.alloc.segments())
}

/// A host `Vec` of `n` copies of `fill`, for the buffers the engine makes outside the allocator
/// (`to_vec`, `to_f64_vec`): `SizeOverflow` or `OutOfMemory` instead of a process abort when `n`
/// is absurd.
pub(crate) fn host_vec<T: Clone>(op: &'static str, n: usize, fill: T) -> Result<Vec<T>> {
    let mut v = host_vec_with_capacity(op, n)?;
    v.resize(n, fill);
    Ok(v)
}

/// An empty host `Vec` with room for `n` values, checked as `host_vec` is. Refuses what the
/// machine's available memory cannot back: with overcommit the reservation would succeed and
/// the process be killed on first touch. (Below 64 MiB the reservation alone decides: reading
/// `/proc/meminfo` would cost more than a small `item()`.)
pub(crate) fn host_vec_with_capacity<T>(op: &'static str, n: usize) -> Result<Vec<T>> {
    let bytes = n
        .checked_mul(std::mem::size_of::<T>())
        .filter(|b| *b <= isize::MAX as usize)
        .ok_or(Error::SizeOverflow { op, shape: vec![n] })?;
    let out_of_memory = |(available, total): (usize, usize)| {
        let cpu = stats(&Device::Cpu).unwrap_or_default();
        Error::OutOfMemory {
            device: Device::Cpu,
            requested: bytes,
            free: available,
            total,
            allocated: cpu.allocated_bytes,
            reserved: cpu.reserved_bytes,
            allowed: None,
        }
    };
    if bytes >= 64 << 20 {
        let info = host::host_memory_info();
        if bytes > info.0 {
            return Err(out_of_memory(info));
        }
    }
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| out_of_memory(host::host_memory_info()))?;
    Ok(v)
}
