//! Copies between host memory and real GPUs, and between GPUs, each timed with CUDA events
//! (created with timing enabled) on the device's stream, plus the host clock around the whole
//! call: what the user waited for. Pinned host memory comes from `cuMemHostAlloc` (flags 0, not
//! write-combined, so the CPU reads it at full speed).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cudarc::driver::{CudaEvent, result, sys};

use super::runtime::{Gpu, gpu};
use crate::{Device, Error, Result};

/// How long a copy took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CopyTime {
    /// Between CUDA events recorded before and after the copy on its stream.
    pub events: Duration,
    /// Host clock from the call to the copy's completion.
    pub wall: Duration,
}

static PINNED_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes of page-locked host memory held by pinned tensors.
pub fn pinned_bytes() -> usize {
    PINNED_BYTES.load(Ordering::Relaxed)
}

/// Page-locked host memory for one pinned CPU storage.
pub(crate) struct PinnedHost {
    ptr: usize,
    bytes: usize,
    /// Keeps a context alive for `cuMemFreeHost`.
    gpu: Arc<Gpu>,
}

impl PinnedHost {
    pub(crate) fn alloc(bytes: usize) -> Result<PinnedHost> {
        let g = gpu(0)?;
        g.bind()?;
        // PORTABLE: every context may use it as pinned memory, not only cuda:0's.
        let ptr = unsafe { result::malloc_host(bytes.max(1), sys::CU_MEMHOSTALLOC_PORTABLE) }
            .map_err(|_| Error::OutOfMemory {
                device: Device::Cpu,
                requested: bytes,
                free: crate::alloc::host::host_memory_info().0,
                total: crate::alloc::host::host_memory_info().1,
                allocated: pinned_bytes(),
                reserved: pinned_bytes(),
            })?;
        PINNED_BYTES.fetch_add(bytes, Ordering::Relaxed);
        Ok(PinnedHost {
            ptr: ptr as usize,
            bytes,
            gpu: g,
        })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        // A storage waits for its in-flight copies before dropping its memory, so no copy
        // engine reads or writes this memory now.
        if self.gpu.bind().is_ok() {
            let _ = unsafe { result::free_host(self.ptr as *mut _) };
        }
        PINNED_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

fn timing_event(g: &Gpu) -> Result<CudaEvent> {
    g.ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| g.err("create event", e))
}

/// A copy queued on a GPU's stream between two timing events.
pub(crate) struct Timing {
    gpu: Arc<Gpu>,
    start: CudaEvent,
    end: CudaEvent,
    issued: Instant,
}

impl Timing {
    /// Waits for the copy and reads its time.
    pub(crate) fn wait(self) -> Result<CopyTime> {
        let g = &self.gpu;
        g.bind()?;
        self.end.synchronize().map_err(|e| g.err(".to()", e))?;
        let wall = self.issued.elapsed();
        let ms = self
            .start
            .elapsed_ms(&self.end)
            .map_err(|e| g.err(".to()", e))?;
        Ok(CopyTime {
            events: Duration::from_secs_f64(ms as f64 / 1e3),
            wall,
        })
    }

    /// Whether the copy has finished (never waits).
    pub(crate) fn is_done(&self) -> bool {
        // A context that cannot be bound reads as "not done": `wait` then reports the error.
        self.gpu.bind().is_ok() && self.end.is_complete()
    }
}

/// Queues `enqueue` between two timing events on `g`'s stream, without waiting for it.
fn timed(g: &Arc<Gpu>, op: &'static str, enqueue: impl FnOnce() -> Result<()>) -> Result<Timing> {
    g.bind()?;
    let (start, end) = (timing_event(g)?, timing_event(g)?);
    let issued = Instant::now();
    start.record(&g.stream).map_err(|e| g.err(op, e))?;
    enqueue()?;
    end.record(&g.stream).map_err(|e| g.err(op, e))?;
    Ok(Timing {
        gpu: g.clone(),
        start,
        end,
        issued,
    })
}

/// Queues a copy of the host bytes `src` to the device address `dst` of `cuda:index`. From
/// pageable memory the driver stages the bytes through its own pinned buffer before the call
/// returns; from pinned memory the copy engine reads `src` while the host goes on, so `src` must
/// stay allocated and untouched until the copy completes.
pub(crate) fn host_to_device(index: usize, src: &[u8], dst: u64) -> Result<Timing> {
    let g = gpu(index)?;
    timed(&g, ".to()", || {
        if src.is_empty() {
            return Ok(()); // an empty tensor's block has no device address to copy to
        }
        unsafe { result::memcpy_htod_async(dst, src, g.stream.cu_stream()) }
            .map_err(|e| g.err(".to()", e))
    })
}

/// Queues a copy of `dst.len()` bytes at the device address `src` of `cuda:index` into host
/// memory (into pageable memory the driver finishes the copy before returning; into pinned
/// memory the copy engine writes `dst` after this returns, so it must stay allocated).
pub(crate) fn device_to_host(index: usize, src: u64, dst: &mut [u8]) -> Result<Timing> {
    let g = gpu(index)?;
    timed(&g, ".to()", || {
        if dst.is_empty() {
            return Ok(());
        }
        unsafe { result::memcpy_dtoh_async(dst, src, g.stream.cu_stream()) }
            .map_err(|e| g.err(".to()", e))
    })
}

/// Queues a copy of `bytes` bytes from `src` on `cuda:from` to `dst` on `cuda:to`, directly
/// between the devices (peer to peer where the hardware allows it, else staged by the driver).
/// The destination's stream waits for the copy, so its later kernels read the copied values.
pub(crate) fn device_to_device(
    (from, src): (usize, u64),
    (to, dst): (usize, u64),
    bytes: usize,
) -> Result<Timing> {
    let (from, to) = (gpu(from)?, gpu(to)?);
    // The destination block may have been freed by a kernel still queued on its device.
    to.synchronize()?;
    let time = timed(&from, ".to()", || {
        if bytes == 0 {
            return Ok(());
        }
        unsafe {
            result::memcpy_peer_async(
                to.ctx.cu_ctx(),
                dst,
                from.ctx.cu_ctx(),
                src,
                bytes,
                from.stream.cu_stream(),
            )
        }
        .map_err(|e| from.err(".to()", e))
    })?;
    to.stream.wait(&time.end).map_err(|e| to.err(".to()", e))?;
    Ok(time)
}
