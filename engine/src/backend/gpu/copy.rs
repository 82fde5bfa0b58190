//! Copies between host memory and GPUs, and between GPUs, each timed with events (timing
//! enabled) on the device's stream, plus the host clock around the whole call: what the user
//! waited for. Pinned host memory comes from `pinned.rs`'s cache.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::call::DriverError;
use super::driver::Event;
use super::runtime::{Gpu, gpu};
use crate::device::error::Result;

/// How long a copy took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CopyTime {
    /// Between CUDA events recorded before and after the copy on its stream.
    pub events: Duration,
    /// Host clock from the call to the copy's completion.
    pub wall: Duration,
    /// Between two GPUs: whether the copy went peer to peer (else through host memory).
    pub peer: Option<bool>,
}

fn timing_event(g: &Gpu) -> Result<Event> {
    g.driver.new_event().map_err(|e| g.err("create event", e))
}

/// A copy queued on a GPU's stream between two timing events.
pub(crate) struct Timing {
    gpu: Arc<Gpu>,
    start: Event,
    end: Event,
    issued: Instant,
    /// Between two GPUs: whether the copy goes peer to peer.
    pub(crate) peer: Option<bool>,
}

impl Timing {
    /// Waits for the copy and reads its time.
    pub(crate) fn wait(self) -> Result<CopyTime> {
        let g = &self.gpu;
        self.end.synchronize().map_err(|e| g.err(".to()", e))?;
        let wall = self.issued.elapsed();
        let ms = self
            .end
            .elapsed_ms_since(&self.start)
            .map_err(|e| g.err(".to()", e))?;
        Ok(CopyTime {
            events: Duration::from_secs_f64(ms as f64 / 1e3),
            wall,
            peer: self.peer,
        })
    }

    /// Whether the copy has finished (never waits).
    pub(crate) fn is_done(&self) -> bool {
        self.end.is_complete()
    }
}

/// A timing event recorded on `g`'s stream now, as a profiled op starts: `close` records the
/// closing one after the op's work, without waiting for it.
pub(crate) struct OpenTiming {
    gpu: Arc<Gpu>,
    start: Event,
}

impl OpenTiming {
    pub(crate) fn start(g: &Arc<Gpu>, op: &'static str) -> Result<OpenTiming> {
        let start = timing_event(g)?;
        g.driver.record(&start).map_err(|e| g.err(op, e))?;
        Ok(OpenTiming {
            gpu: g.clone(),
            start,
        })
    }

    /// Records the closing event behind the work queued since `start`; never waits.
    pub(crate) fn close(self, op: &'static str) -> Result<ClosedTiming> {
        let g = &self.gpu;
        let end = timing_event(g)?;
        g.driver.record(&end).map_err(|e| g.err(op, e))?;
        Ok(ClosedTiming {
            gpu: self.gpu,
            start: self.start,
            end,
        })
    }
}

/// One timing event recorded on a GPU's current stream: what other events are timed from.
pub(crate) struct TimingEvent(Event);

impl TimingEvent {
    pub(crate) fn record(g: &Arc<Gpu>, op: &'static str) -> Result<TimingEvent> {
        let e = timing_event(g)?;
        g.driver.record(&e).map_err(|e| g.err(op, e))?;
        Ok(TimingEvent(e))
    }
}

/// A profiled op's two timing events, both recorded: its time on the stream once the stream has
/// reached the closing one. Dropping it destroys the events (CUDA lets an event be destroyed
/// before the stream reaches it).
pub(crate) struct ClosedTiming {
    gpu: Arc<Gpu>,
    start: Event,
    end: Event,
}

impl ClosedTiming {
    /// Whether the stream has reached the closing event (never waits).
    pub(crate) fn is_done(&self) -> bool {
        self.end.is_complete()
    }

    /// The time from `origin` to the opening event, both reached.
    pub(crate) fn since(&self, origin: &TimingEvent) -> Result<Duration> {
        let ms = self
            .start
            .elapsed_ms_since(&origin.0)
            .map_err(|e| self.gpu.err("profile", e))?;
        Ok(Duration::from_secs_f64(ms.max(0.0) as f64 / 1e3))
    }

    /// The time between the events, once the stream has reached the closing one (the caller
    /// waited for the device); never waits: an event not reached yet is an error.
    pub(crate) fn read(self, op: &'static str) -> Result<Duration> {
        let g = &self.gpu;
        if !self.is_done() {
            return Err(g.err(op, DriverError::EventNotReached));
        }
        let ms = self
            .end
            .elapsed_ms_since(&self.start)
            .map_err(|e| g.err(op, e))?;
        Ok(Duration::from_secs_f64(ms as f64 / 1e3))
    }
}

/// Queues `enqueue` between two timing events on `g`'s stream, without waiting for it.
fn timed(g: &Arc<Gpu>, op: &'static str, enqueue: impl FnOnce() -> Result<()>) -> Result<Timing> {
    let (start, end) = (timing_event(g)?, timing_event(g)?);
    let issued = Instant::now();
    g.driver.record(&start).map_err(|e| g.err(op, e))?;
    enqueue()?;
    g.driver.record(&end).map_err(|e| g.err(op, e))?;
    Ok(Timing {
        gpu: g.clone(),
        start,
        end,
        issued,
        peer: None,
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
        // SAFETY: `dst` is a block of `src.len()` bytes; the caller keeps pinned `src` alive.
        unsafe { g.driver.copy_htod(dst, src) }.map_err(|e| g.err(".to()", e))
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
        // SAFETY: as in `host_to_device`, the other way round.
        unsafe { g.driver.copy_dtoh(dst, src) }.map_err(|e| g.err(".to()", e))
    })
}

/// Copies `dst.len()` bytes at the device address `src` of `cuda:index` into pageable host
/// memory, untimed, and returns once they are there: reading values back (`item`, `to_vec`),
/// after the caller has waited for the device's queue. Without a transfer's two timing events,
/// the read costs what PyTorch's `item()` does: one copy.
pub(crate) fn device_to_host_untimed(index: usize, src: u64, dst: &mut [u8]) -> Result<()> {
    let g = gpu(index)?;
    if dst.is_empty() {
        return Ok(());
    }
    // SAFETY: `src` holds `dst.len()` bytes; into pageable memory the copy is done on return.
    unsafe { g.driver.copy_dtoh(dst, src) }.map_err(|e| g.err("reading values back", e))
}

/// Queues a copy of `bytes` bytes from `src` on `cuda:from` to `dst` on `cuda:to`, directly
/// between the devices: peer to peer where the hardware allows it (peer access is enabled once
/// per ordered pair, before the first copy), else staged by the driver through host memory.
/// Neither device's queue blocks the host: the copy waits on the GPU for the work queued on the
/// destination so far (the block may have been freed there by a kernel still queued), and the
/// destination's stream waits for the copy, so its later kernels read the copied values.
pub(crate) fn device_to_device(
    (from, src): (usize, u64),
    (to, dst): (usize, u64),
    bytes: usize,
) -> Result<Timing> {
    let (from, to) = (gpu(from)?, gpu(to)?);
    let peer = from.peer_to(&to)?;
    let ready = to.driver.new_event().map_err(|e| to.err(".to()", e))?;
    to.driver.record(&ready).map_err(|e| to.err(".to()", e))?;
    from.driver
        .wait_event(&ready)
        .map_err(|e| from.err(".to()", e))?;
    let time = timed(&from, ".to()", || {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: both are live blocks of `bytes` bytes on their devices.
        unsafe { from.driver.copy_peer(&to.driver, dst, src, bytes) }
            .map_err(|e| from.err(".to()", e))
    })?;
    to.driver
        .wait_event(&time.end)
        .map_err(|e| to.err(".to()", e))?;
    Ok(Timing {
        peer: Some(peer),
        ..time
    })
}
