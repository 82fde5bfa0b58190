//! The bytes of a tensor, on some backend. This is the only place that matches on the backend.
//! A backend's duty, written once: every op the tensor layer needs is one function here that
//!  1. opens its profile scope with its `Work` (what the cost model prices),
//!  2. allocates its outputs itself (`Storage::alloc`),
//!  3. sends host-backed storages (the CPU and simulated CUDA devices) to a `backend/cpu` kernel
//!     over slices, and GPU storages to a `backend/gpu` launcher over device pointers (`produce`
//!     does both for an op of one output),
//!  4. and returns a `Storage` on every backend: never an `Option` for the caller to branch on.
//!
//! `.ci/layers.py` holds the other side: `tensor/` names no backend, kernel launcher or byte
//! slice, and `train/` no `Storage`. Element-wise ops are in `ops.rs`, reductions and layer norm
//! in `reduce.rs`, gathers by index entries in `gather.rs`, copies to other devices in
//! `copy.rs`.

mod copy;
mod gather;
mod matmul;
mod ops;
mod optim;
mod random;
mod reduce;
pub(crate) mod stream;

use std::sync::{Arc, Mutex};

pub(crate) use crate::backend::cpu::elementwise::Steps;
pub(crate) use copy::{Completion, open_devices};
pub(crate) use gather::index_positions;
pub(crate) use optim::UpdateSlot;

use crate::backend::cpu;
use crate::backend::gpu::copy::{ClosedTiming, OpenTiming};
use crate::backend::gpu::pinned::PinnedHost;
use crate::backend::gpu::runtime::Gpu;
use crate::base::dtype::{DType, Element};
use crate::base::op::Op;
use crate::device::Device;
use crate::device::error::Result;
use crate::memory::Block;
use crate::profile::{self, OpScope, Work};

pub(crate) enum Backing {
    /// Host memory from the device's caching allocator: the CPU, or a simulated GPU.
    Host(Block),
    /// Memory of a GPU, real or emulated, from its caching allocator (a device address).
    Cuda(Block),
    /// Page-locked host memory for a GPU's copy engine (`pin_memory()`).
    Pinned(PinnedHost),
}

/// A non-blocking copy that reads or writes a storage's bytes and may still be running (the
/// transfer layer's `InFlight`): host access and freeing wait for it.
pub(crate) trait PendingCopy: Send + Sync {
    /// Returns once the copy has finished (its error, if any, is reported where the copy is
    /// completed and logged).
    fn wait_done(&self);

    /// Whether the copy has finished (never waits).
    fn is_done(&self) -> bool;
}

pub(crate) struct Storage {
    dtype: DType,
    numel: usize,
    /// Page-locked host memory (`pin_memory()`): transfers from it are recorded as pinned.
    pub(crate) pinned: bool,
    backing: Backing,
    /// Non-blocking copies that read or write these bytes and may still be running.
    in_flight: Mutex<Vec<Arc<dyn PendingCopy>>>,
}

impl Drop for Storage {
    fn drop(&mut self) {
        // A copy engine or a copy thread may still be using the memory.
        let pending: Vec<_> = (self.in_flight.get_mut().unwrap_or_else(|e| e.into_inner()))
            .drain(..)
            .collect();
        if pending.is_empty() {
            return;
        }
        if let Backing::Pinned(p) = &mut self.backing {
            // Pinned memory goes back to its cache without waiting; the cache hands it out
            // again only once the copies are done.
            p.release_after(Box::new(move || pending.iter().all(|f| f.is_done())));
            return;
        }
        for f in pending {
            f.wait_done();
        }
    }
}

impl Storage {
    /// Marks the bytes as used by `stream`'s work too (`Tensor::record_stream`): freed, they are
    /// reused only once the work `stream` has queued by then is done. `stream` must be of the
    /// storage's device.
    pub(crate) fn record_stream(&self, stream: &stream::Stream) -> Result<()> {
        let mismatch = |what: &str| crate::device::error::Error::InvalidArgument {
            op: "record_stream",
            msg: format!(
                "{what} is on {} and {stream:?} is of {}: record a stream of the tensor's own device (`cuda::current_stream(&t.device())`), as PyTorch requires",
                self.device(),
                stream.device()
            ),
        };
        match &self.backing {
            Backing::Host(b) | Backing::Cuda(b) if b.device() == stream.device() => {
                b.record_stream(stream.id());
                Ok(())
            }
            // A pinned tensor's copies are waited for before its memory is reused (`PinnedHost`).
            Backing::Pinned(_) if stream.device().is_cpu() => Ok(()),
            _ => Err(mismatch("the tensor")),
        }
    }
}

fn gpu_index(device: Device) -> usize {
    device.index().expect("a GPU device has an index")
}

impl Storage {
    fn new(dtype: DType, numel: usize, pinned: bool, backing: Backing) -> Storage {
        Storage {
            dtype,
            numel,
            pinned,
            backing,
            in_flight: Mutex::default(),
        }
    }

    /// A storage of `numel` elements whose contents are unspecified (bool storages are zeroed,
    /// since not every byte is a valid `bool`).
    pub(crate) fn alloc(device: Device, dtype: DType, numel: usize) -> Result<Storage> {
        let block = Block::alloc(device, dtype, numel)?;
        if device
            .kind()
            .is_ok_and(crate::device::DeviceKind::runs_gpu_backend)
        {
            return Ok(Storage::new(dtype, numel, false, Backing::Cuda(block)));
        }
        let mut s = Storage::new(dtype, numel, false, Backing::Host(block));
        if dtype == DType::Bool {
            cpu::fill(s.bytes_mut(), 0u8);
        }
        Ok(s)
    }

    /// A CPU storage in page-locked memory from the driver (a GPU, real or emulated, must exist),
    /// taken through `cuda:near`'s context (see `PinnedHost::alloc`).
    pub(crate) fn alloc_pinned(dtype: DType, numel: usize, near: Option<usize>) -> Result<Storage> {
        let bytes = numel * dtype.size_in_bytes();
        let mut s = Storage::new(
            dtype,
            numel,
            true,
            Backing::Pinned(PinnedHost::alloc(bytes, near)?),
        );
        if dtype == DType::Bool {
            cpu::fill(s.bytes_mut(), 0u8);
        }
        Ok(s)
    }

    pub(crate) fn device(&self) -> Device {
        match &self.backing {
            Backing::Host(b) | Backing::Cuda(b) => b.device(),
            Backing::Pinned(_) => Device::Cpu,
        }
    }

    /// Whether the bytes are in host memory (readable without a device copy).
    pub(crate) fn is_host(&self) -> bool {
        !matches!(self.backing, Backing::Cuda(_))
    }

    /// The GPU (real or emulated) this storage lives on, or `None` for host memory.
    fn gpu(&self) -> Option<Result<Arc<Gpu>>> {
        match &self.backing {
            Backing::Cuda(b) => Some(crate::backend::gpu::runtime::gpu(gpu_index(b.device()))),
            _ => None,
        }
    }

    /// The device address of a GPU's storage, as kernels and cuBLAS take it.
    fn device_ptr(&self) -> u64 {
        match &self.backing {
            Backing::Cuda(b) => b.ptr() as u64,
            _ => unreachable!("a host storage has no device pointer"),
        }
    }

    /// The start of a host-backed storage's bytes, once no copy is using them.
    fn host_ptr(&self) -> *mut u8 {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        for f in in_flight.drain(..) {
            f.wait_done();
        }
        drop(in_flight);
        match &self.backing {
            Backing::Host(b) => b.ptr(),
            Backing::Pinned(p) => p.ptr(),
            Backing::Cuda(_) => {
                unreachable!("GPU memory is read through a copy (`Tensor::host_readable`)")
            }
        }
    }

    /// Records that a non-blocking copy reads or writes these bytes: host access and freeing
    /// wait for it.
    pub(crate) fn mark_in_flight(&self, f: Arc<dyn PendingCopy>) {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(f);
    }

    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }

    pub(crate) fn numel(&self) -> usize {
        self.numel
    }

    /// The allocator's id of this storage (its key in the memory ledger).
    pub(crate) fn id(&self) -> u64 {
        match &self.backing {
            Backing::Host(b) | Backing::Cuda(b) => b.id(),
            Backing::Pinned(p) => p.ptr() as u64,
        }
    }

    /// Bytes of the block this storage holds (rounded up by the allocator).
    pub(crate) fn block_bytes(&self) -> usize {
        match &self.backing {
            Backing::Host(b) | Backing::Cuda(b) => b.size(),
            Backing::Pinned(p) => p.bytes(),
        }
    }

    pub(crate) fn slice<T: Element>(&self) -> &[T] {
        cpu::check_dtype::<T>(self.dtype);
        // SAFETY: host memory holding `numel` elements of this dtype, aligned to 512 bytes (or
        // a page, when pinned).
        unsafe { std::slice::from_raw_parts(self.host_ptr() as *const T, self.numel) }
    }

    pub(crate) fn slice_mut<T: Element>(&mut self) -> &mut [T] {
        cpu::check_dtype::<T>(self.dtype);
        // SAFETY: as in `slice`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.host_ptr() as *mut T, self.numel) }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        let n = self.numel * self.dtype.size_in_bytes();
        // SAFETY: the host memory holds at least `n` bytes.
        unsafe { std::slice::from_raw_parts(self.host_ptr(), n) }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        let n = self.numel * self.dtype.size_in_bytes();
        // SAFETY: the host memory holds at least `n` bytes; access is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.host_ptr(), n) }
    }

    /// A storage holding `values` (uploaded when `device` is a GPU).
    pub(crate) fn from_slice<T: Element>(device: Device, values: &[T]) -> Result<Storage> {
        let mut s = Storage::alloc(device.host_side(), T::DTYPE, values.len())?;
        s.slice_mut::<T>().copy_from_slice(values);
        s.moved_to(device)
    }

    /// A new storage of `numel` elements of `dtype` on this storage's device, filled by `host`
    /// (given the new storage) when the bytes are host memory, else by `gpu` (given the device
    /// and the new storage's address): the one place each op meets the backend.
    fn produce(
        &self,
        dtype: DType,
        numel: usize,
        host: impl FnOnce(&mut Storage),
        gpu: impl FnOnce(&Gpu, u64) -> Result<()>,
    ) -> Result<Storage> {
        let mut out = Storage::alloc(self.device(), dtype, numel)?;
        match self.gpu() {
            Some(g) => gpu(&*g?, out.device_ptr())?,
            None => host(&mut out),
        }
        Ok(out)
    }

    /// Times the op `name` on this storage's device while a profile records (see `profiled`).
    pub(crate) fn profiled(&self, op: Op, work: Work) -> Option<OpScope> {
        profiled(self.device(), op, work)
    }
}

/// Times the op `name` on `device` while a profile records. On a GPU (real or emulated) the
/// outermost op also gets CUDA events around its work on the stream, read after the profiled
/// code returned: they give its GPU time, while its host time ends as its work is queued.
pub(crate) fn profiled(device: Device, op: Op, work: Work) -> Option<OpScope> {
    if !profile::recording() {
        return None;
    }
    let on_gpu = device
        .kind()
        .is_ok_and(crate::device::DeviceKind::runs_gpu_backend);
    let clock = profile::GpuClock {
        start: time_on_gpu,
        wait: wait_for_queued_work,
        origin: gpu_origin,
    };
    profile::begin(op, device, work, on_gpu.then_some(clock))
}

/// Waits for every kernel and copy queued on `device`'s stream (a GPU's); host-backed
/// devices run their kernels to completion before returning, so there is nothing to wait for.
pub(crate) fn wait_for_queued_work(device: Device) -> Result<()> {
    match device {
        Device::Cuda(i)
            if device
                .kind()
                .is_ok_and(crate::device::DeviceKind::runs_gpu_backend) =>
        {
            let g = crate::backend::gpu::runtime::gpu(i)?;
            g.wait_interruptibly("synchronize")?;
            g.synchronize()
        }
        _ => Ok(()),
    }
}

/// Records a timing event on `device`'s stream; the `Finish` records the closing one, without
/// waiting (no events when the device cannot make them: the op then has no GPU time).
fn time_on_gpu(device: Device) -> profile::Finish {
    let timing = match device {
        Device::Cuda(i) => {
            crate::backend::gpu::runtime::gpu(i).and_then(|g| OpenTiming::start(&g, "profile"))
        }
        Device::Cpu => unreachable!("only a GPU is timed with events"),
    };
    Box::new(move || {
        let closed = timing.ok()?.close("profile").ok()?;
        Some(Box::new(closed) as Box<dyn profile::PendingGpuTime>)
    })
}

impl profile::PendingGpuTime for ClosedTiming {
    fn is_done(&self) -> bool {
        ClosedTiming::is_done(self)
    }

    fn read(self: Box<Self>, origin: Option<&dyn profile::GpuOrigin>) -> Option<profile::GpuTime> {
        let origin = origin.and_then(|o| o.as_any().downcast_ref::<OriginEvent>());
        let since_origin = origin.and_then(|o| self.since(&o.0).ok());
        let time = ClosedTiming::read(*self, "profile").ok()?;
        Some(profile::GpuTime { time, since_origin })
    }
}

/// A GPU's first event in a profile (`profile::GpuOrigin`).
struct OriginEvent(crate::backend::gpu::copy::TimingEvent);

impl profile::GpuOrigin for OriginEvent {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Records `device`'s origin event on its current stream now (none when it cannot be made).
fn gpu_origin(device: Device) -> Option<Box<dyn profile::GpuOrigin>> {
    let g = crate::backend::gpu::runtime::gpu(gpu_index(device)).ok()?;
    let event = crate::backend::gpu::copy::TimingEvent::record(&g, "profile").ok()?;
    Some(Box::new(OriginEvent(event)))
}
