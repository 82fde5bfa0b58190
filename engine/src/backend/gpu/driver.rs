//! The seam between the CUDA backend and what runs it: the few driver services the backend
//! uses, as one closed enum with a variant per kind of CUDA device (candle's `Storage` is the
//! model): a real GPU through cudarc's driver API, cuBLAS and NVRTC (`cuda_driver`), or the
//! emulator (`emulated`: host memory, the same `kernels/*.cu` compiled for the CPU, a worker
//! thread per device as its stream). Adding a kind adds a variant, and the compiler lists every
//! method to give it. The rest of `gpu/` (launch geometry, argument packing, the kernels' views,
//! GEMM operand mapping, timed and ordered copies) is shared by every kind.
//!
//! Each device has streams, numbered from its default stream, 0: what is queued on one runs in
//! order, and the host only waits where a method says so. A method that queues work queues it
//! on the calling thread's current stream of the device (`device::current_stream`); the `_on`
//! methods name a stream. Errors are a `DriverError` (`call.rs`, with what a call takes); the caller names the op and
//! the device.
//! Every `unsafe` method takes device addresses the caller vouches for: live blocks of this
//! device (or, for host slices, memory that stays valid as documented).

use std::time::Duration;

pub use super::args::Arg;
use super::call::DriverResult;
pub use super::call::{DriverError, Gemm, Grid};
use super::cuda_driver::{CudaDriver, CudaEvent};
use super::emulated::{EmulatedDriver, EmulatedEvent};
use super::nvrtc::KernelSource;
use crate::device::Device;
use crate::device::current_stream::{StreamId, current};

/// The driver behind one CUDA device.
pub(crate) enum Driver {
    Cuda(CudaDriver),
    Emulated(EmulatedDriver),
}

/// A point on a device's stream that the host (or another stream) can wait for, and that
/// timestamps when the stream reaches it; made by its device's `Driver::new_event`.
pub(crate) enum Event {
    Cuda(CudaEvent),
    Emulated(EmulatedEvent),
}

/// `$body` with `$d` bound to whichever driver (or event) `$on` holds: the methods every kind
/// implements alike. Methods on two devices match the pair, every pair written out (no
/// catch-all), so a new kind makes the compiler list each one.
macro_rules! each_kind {
    ($on:expr, $ty:ident, $d:ident => $body:expr) => {
        match $on {
            $ty::Cuda($d) => $body,
            $ty::Emulated($d) => $body,
        }
    };
}

impl Driver {
    /// The device's name (`NVIDIA H100 80GB HBM3`).
    pub(crate) fn name(&self) -> DriverResult<String> {
        each_kind!(self, Driver, d => d.name())
    }

    /// Compute capability, e.g. (9, 0).
    pub(crate) fn compute_capability(&self) -> (i32, i32) {
        each_kind!(self, Driver, d => d.compute_capability())
    }

    /// `bytes` of device memory.
    pub(crate) fn malloc(&self, bytes: usize) -> DriverResult<u64> {
        each_kind!(self, Driver, d => d.malloc(bytes))
    }

    /// Returns a block from `malloc`, after the stream's queued work is done.
    ///
    /// # Safety
    /// `ptr` came from this driver's `malloc` and nothing uses it afterwards.
    pub(crate) unsafe fn free(&self, ptr: u64, bytes: usize) {
        each_kind!(self, Driver, d => unsafe { d.free(ptr, bytes) })
    }

    /// (free, total) bytes of the device.
    pub(crate) fn mem_info(&self) -> (usize, usize) {
        each_kind!(self, Driver, d => d.mem_info())
    }

    /// Page-locked host memory that any device's copies may read and write asynchronously.
    pub(crate) fn malloc_host(&self, bytes: usize) -> DriverResult<*mut u8> {
        each_kind!(self, Driver, d => d.malloc_host(bytes))
    }

    /// # Safety
    /// `ptr` came from `malloc_host(bytes)` and no copy uses it.
    pub(crate) unsafe fn free_host(&self, ptr: *mut u8, bytes: usize) {
        each_kind!(self, Driver, d => unsafe { d.free_host(ptr, bytes) })
    }

    /// A block of the caching allocator's was lent to a tensor (`usable`, its requested bytes)
    /// or returned (its whole size). Only the emulator acts on it: under AddressSanitizer a
    /// kernel may touch only the bytes a tensor asked for, in the stream's order, as a GPU's
    /// caching allocator reuses memory.
    pub(crate) fn mark_block(&self, addr: usize, bytes: usize, usable: bool, stream: StreamId) {
        match self {
            Driver::Cuda(_) => {}
            Driver::Emulated(d) => d.mark_block(addr, bytes, usable, stream),
        }
    }

    /// A new stream of the device, running beside its others; its number.
    pub(crate) fn new_stream(&self) -> DriverResult<StreamId> {
        each_kind!(self, Driver, d => d.new_stream())
    }

    /// How many streams the device has made, its default stream included.
    pub(crate) fn stream_count(&self) -> usize {
        each_kind!(self, Driver, d => d.stream_count())
    }

    /// Whether everything queued on `stream` so far has finished (never waits).
    pub(crate) fn stream_is_idle(&self, stream: StreamId) -> DriverResult<bool> {
        each_kind!(self, Driver, d => d.stream_is_idle(stream))
    }

    /// Holds `stream` until the returned `Hold` is dropped, as a long kernel would: the work
    /// queued on it after waits, the device's other streams go on. Emulated devices only: a
    /// test and a lesson make a race certain with it.
    pub(crate) fn hold(&self, stream: StreamId) -> DriverResult<super::emulated::Hold> {
        match self {
            Driver::Cuda(_) => Err(DriverError::Cuda(
                "holding a stream is for emulated devices: on a GPU, queue a long kernel (a large matmul) instead".into(),
            )),
            Driver::Emulated(d) => d.hold(stream),
        }
    }

    /// Queues a copy of `src` to `dst`. From pageable memory `src` is read before this returns;
    /// from `malloc_host` memory it is read later, in stream order.
    ///
    /// # Safety
    /// `dst` holds `src.len()` bytes; pinned `src` stays valid until the copy is done.
    pub(crate) unsafe fn copy_htod(&self, dst: u64, src: &[u8]) -> DriverResult<()> {
        each_kind!(self, Driver, d => unsafe { d.copy_htod(dst, src) })
    }

    /// Queues a copy of `dst.len()` bytes at `src` into `dst`. Into pageable memory this returns
    /// once the bytes are there; into `malloc_host` memory they arrive later, in stream order.
    ///
    /// # Safety
    /// As `copy_htod`, the other way round.
    pub(crate) unsafe fn copy_dtoh(&self, dst: &mut [u8], src: u64) -> DriverResult<()> {
        each_kind!(self, Driver, d => unsafe { d.copy_dtoh(dst, src) })
    }

    /// Queues, on this (the source's) stream, a copy of `bytes` from `src` here to `dst` on
    /// the device `to`.
    ///
    /// # Safety
    /// Both ranges are live blocks of their devices.
    pub(crate) unsafe fn copy_peer(
        &self,
        to: &Driver,
        dst: u64,
        src: u64,
        bytes: usize,
    ) -> DriverResult<()> {
        match (self, to) {
            (Driver::Cuda(from), Driver::Cuda(to)) => unsafe {
                from.copy_peer(to, dst, src, bytes)
            },
            (Driver::Emulated(from), Driver::Emulated(to)) => unsafe {
                from.copy_peer(to, dst, src, bytes)
            },
            (Driver::Cuda(_), Driver::Emulated(_)) | (Driver::Emulated(_), Driver::Cuda(_)) => {
                Err(DriverError::MixedKinds("a peer copy"))
            }
        }
    }

    /// Lets this device's copies reach `to`'s memory directly (`cuCtxEnablePeerAccess`), where
    /// the hardware allows it; returns whether it does. Without it the driver stages a copy
    /// between the two through host memory. Called once per ordered pair, before the first copy.
    pub(crate) fn enable_peer_access(&self, to: &Driver) -> DriverResult<bool> {
        match (self, to) {
            (Driver::Cuda(from), Driver::Cuda(to)) => from.enable_peer_access(to),
            (Driver::Emulated(from), Driver::Emulated(to)) => from.enable_peer_access(to),
            (Driver::Cuda(_), Driver::Emulated(_)) | (Driver::Emulated(_), Driver::Cuda(_)) => {
                Err(DriverError::MixedKinds("peer access"))
            }
        }
    }

    /// An event that can time (created with timing enabled).
    pub(crate) fn new_event(&self) -> DriverResult<Event> {
        match self {
            Driver::Cuda(d) => d.new_event().map(Event::Cuda),
            Driver::Emulated(d) => d.new_event().map(Event::Emulated),
        }
    }

    /// The calling thread's current stream of this device.
    pub(crate) fn current(&self) -> StreamId {
        let index = each_kind!(self, Driver, d => d.index());
        current(Device::Cuda(index))
    }

    /// Records `event` at the current end of this device's current stream.
    pub(crate) fn record(&self, event: &Event) -> DriverResult<()> {
        self.record_on(event, self.current())
    }

    /// Records `event` at the current end of `stream`.
    pub(crate) fn record_on(&self, event: &Event, stream: StreamId) -> DriverResult<()> {
        match (self, event) {
            (Driver::Cuda(d), Event::Cuda(e)) => d.record_on(e, stream),
            (Driver::Emulated(d), Event::Emulated(e)) => d.record_on(e, stream),
            (Driver::Cuda(_), Event::Emulated(_)) | (Driver::Emulated(_), Event::Cuda(_)) => {
                Err(DriverError::MixedKinds("an event recorded"))
            }
        }
    }

    /// Makes this device's current stream wait (without blocking the host) until `event`,
    /// possibly of another device, is reached.
    pub(crate) fn wait_event(&self, event: &Event) -> DriverResult<()> {
        self.wait_event_on(self.current(), event)
    }

    /// Makes `stream` wait (without blocking the host) until `event` is reached.
    pub(crate) fn wait_event_on(&self, stream: StreamId, event: &Event) -> DriverResult<()> {
        match (self, event) {
            (Driver::Cuda(d), Event::Cuda(e)) => d.wait_event_on(stream, e),
            (Driver::Emulated(d), Event::Emulated(e)) => d.wait_event_on(stream, e),
            (Driver::Cuda(_), Event::Emulated(_)) | (Driver::Emulated(_), Event::Cuda(_)) => {
                Err(DriverError::MixedKinds("a stream waiting for an event"))
            }
        }
    }

    /// Waits until all work queued on every stream of the device has finished.
    pub(crate) fn synchronize(&self) -> DriverResult<()> {
        each_kind!(self, Driver, d => d.synchronize())
    }

    /// Queues kernel `name` of `source` with `args`; refuses arguments that do not match the
    /// kernel's parameters.
    ///
    /// # Safety
    /// Every pointer argument addresses live device memory holding what the kernel reads and
    /// writes there.
    pub(crate) unsafe fn launch(
        &self,
        source: &KernelSource,
        name: &str,
        grid: Grid,
        args: &[Arg],
    ) -> DriverResult<()> {
        each_kind!(self, Driver, d => unsafe { d.launch(source, name, grid, args) })
    }

    /// Queues a GEMM. `workspace` is device memory of `workspace_bytes` that the driver may use
    /// for as long as the device lives.
    ///
    /// # Safety
    /// The operands and the output are live device memory of the sizes the call implies.
    pub(crate) unsafe fn gemm(&self, call: &Gemm, workspace: (u64, usize)) -> DriverResult<()> {
        each_kind!(self, Driver, d => unsafe { d.gemm(call, workspace) })
    }
}

impl Event {
    /// Waits until the stream has reached the event.
    pub(crate) fn synchronize(&self) -> DriverResult<()> {
        each_kind!(self, Event, e => e.synchronize())
    }

    /// Whether the stream has reached the event, or the work before it failed (never waits;
    /// `synchronize` then reports the failure).
    pub(crate) fn is_complete(&self) -> bool {
        each_kind!(self, Event, e => e.is_complete())
    }

    /// Waits until the stream reaches the event or `limit` has passed; whether it was reached
    /// (or failed). The host wakes as soon as it is: a real GPU's event is polled in a busy loop,
    /// as the CUDA runtime's default wait does; the emulator's stream wakes its waiter.
    pub(crate) fn wait_up_to(&self, limit: Duration) -> bool {
        each_kind!(self, Event, e => e.wait_up_to(limit))
    }

    /// Milliseconds from `start` to this event, both reached.
    pub(crate) fn elapsed_ms_since(&self, start: &Event) -> DriverResult<f32> {
        match (self, start) {
            (Event::Cuda(end), Event::Cuda(start)) => end.elapsed_ms_since(start),
            (Event::Emulated(end), Event::Emulated(start)) => end.elapsed_ms_since(start),
            (Event::Cuda(_), Event::Emulated(_)) | (Event::Emulated(_), Event::Cuda(_)) => {
                Err(DriverError::MixedKinds("a time between two events"))
            }
        }
    }
}
