//! An op's time on a GPU: the CUDA events around its work, read after the profiled code
//! returned (one wait per device), or at once in a blocking profile; and how busy each GPU was
//! over the step, which says whether the step was bound by the host or by the GPU.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::{OpRecord, Profile};
use crate::device::Device;
use crate::device::error::Result;

/// A GPU op's two CUDA events, both recorded on its stream: its time there once the stream has
/// reached the closing one. Dropped unread, the events are destroyed all the same.
pub trait PendingGpuTime: Send {
    /// Whether the stream has reached the closing event (never waits).
    fn is_done(&self) -> bool;
    /// The time between the events, and from `origin` (its device's first event in the profile)
    /// to the opening one (`None` while the stream has not reached the closing one, or when the
    /// device failed); never waits. The events are destroyed.
    fn read(self: Box<Self>, origin: Option<&dyn GpuOrigin>) -> Option<GpuTime>;
}

/// A device's first CUDA event in a profile, recorded as its first op began: what the other
/// events' times are measured from (`PendingGpuTime::read`).
pub trait GpuOrigin: Send {
    /// For the implementation to find its own type again.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// An op's work on its GPU, read from its events.
#[derive(Debug, Clone, Copy)]
pub struct GpuTime {
    /// From the opening event to the closing one.
    pub time: Duration,
    /// From the device's origin event to the opening one.
    pub since_origin: Option<Duration>,
}

/// Ends a GPU op's timing: records the closing CUDA event behind its work, without waiting,
/// and gives the pair to read later (`None` when the events could not be made or recorded).
pub type Finish = Box<dyn FnOnce() -> Option<Box<dyn PendingGpuTime>>>;

/// How the profiler times ops on a GPU's stream (the storage layer's, for the CUDA backend).
#[derive(Clone, Copy)]
pub struct GpuClock {
    /// Records the opening CUDA event on the device's stream; gives what records the closing one.
    pub start: fn(Device) -> Finish,
    /// Waits for everything queued on the device's stream so far.
    pub wait: fn(Device) -> Result<()>,
    /// Records the device's origin event now (`GpuOrigin`).
    pub origin: fn(Device) -> Option<Box<dyn GpuOrigin>>,
}

/// A device's origin event and when the host recorded it, from the start of the profile: GPU
/// times are placed on the host's clock as if the event was reached when it was recorded.
pub(super) struct Origin {
    pub(super) event: Box<dyn GpuOrigin>,
    pub(super) at: Duration,
}

/// The op `op` ran, with its events read against its device's origin.
fn store(op: &mut OpRecord, time: Option<GpuTime>, origin: Option<&Origin>) {
    op.gpu_time = time.map(|t| t.time);
    op.gpu_start = time
        .and_then(|t| t.since_origin)
        .zip(origin)
        .map(|(since, o)| o.at + since);
}

/// An op whose GPU time is still to be read: its index among the profile's ops.
pub(super) struct Pending {
    pub(super) op: usize,
    pub(super) time: Box<dyn PendingGpuTime>,
}

/// Events pending at once before the ones already reached are read (and destroyed) as the code
/// goes on, so that a long profile does not hold an event pair per op it ran.
pub(super) const READ_REACHED_BEYOND: usize = 1024;

/// Reads the oldest pending times, as far as the streams have reached them, into their ops
/// without waiting (a stream reaches its events in order, so this stops at the first one not
/// reached: one query per op while the GPU runs behind the host).
pub(super) fn read_reached(
    ops: &mut [OpRecord],
    pending: &mut VecDeque<Pending>,
    origins: &BTreeMap<Device, Origin>,
) {
    while let Some(p) = pending.pop_front() {
        if !p.time.is_done() {
            pending.push_front(p);
            return;
        }
        let origin = origins.get(&ops[p.op].device);
        let time = p.time.read(origin.map(|o| &*o.event));
        store(&mut ops[p.op], time, origin);
    }
}

/// After the code returned: waits once for each GPU it ran ops on, then reads every pending
/// op's time (a device whose wait failed, or was interrupted, leaves its ops without one; their
/// events are destroyed all the same).
pub(super) fn settle(
    ops: &mut [OpRecord],
    pending: VecDeque<Pending>,
    clocks: &BTreeMap<Device, GpuClock>,
    origins: &BTreeMap<Device, Origin>,
) {
    for (device, clock) in clocks {
        // A failure here is the device's, and was (or will be) reported by the code's own ops.
        let _ = (clock.wait)(*device);
    }
    for p in pending {
        let origin = origins.get(&ops[p.op].device);
        let time = p.time.read(origin.map(|o| &*o.event));
        store(&mut ops[p.op], time, origin);
    }
}

/// What held a step back, from how busy its GPU was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The GPU was idle most of the step, waiting for the host to queue work.
    Host,
    /// The GPU was busy nearly all the step: the host queued work faster than it ran.
    Gpu,
    /// Neither clearly: the GPU was idle part of the step.
    Mixed,
}

/// One GPU's work over a profiled step.
#[derive(Debug, Clone, Copy)]
pub struct GpuBusy {
    pub device: Device,
    /// Its ops' time on its stream, between CUDA events, added up.
    pub busy: Duration,
    /// From the start of the code until the device's work was done (at least the code's wall
    /// time: queued work may run on after the code returned).
    pub span: Duration,
}

/// Below this share of the step the GPU is mostly idle: the step is host-bound.
const HOST_BOUND_BELOW: f64 = 0.5;
/// From this share on the GPU is busy nearly throughout: the step is GPU-bound.
const GPU_BOUND_FROM: f64 = 0.8;

impl GpuBusy {
    /// `busy` as a share of `span`.
    pub fn share(&self) -> f64 {
        self.busy.as_secs_f64() / self.span.as_secs_f64().max(1e-12)
    }

    pub fn bound(&self) -> Bound {
        match self.share() {
            s if s < HOST_BOUND_BELOW => Bound::Host,
            s if s >= GPU_BOUND_FROM => Bound::Gpu,
            _ => Bound::Mixed,
        }
    }
}

impl Profile {
    /// Each GPU's busy time over the step, for the GPUs whose ops have CUDA event times.
    pub fn gpu_busy(&self) -> Vec<GpuBusy> {
        let mut busy: BTreeMap<Device, Duration> = BTreeMap::new();
        for op in &self.ops {
            if let Some(g) = op.gpu_time {
                *busy.entry(op.device).or_default() += g;
            }
        }
        let span = self.gpu_done.unwrap_or(self.wall).max(self.wall);
        busy.into_iter()
            .map(|(device, busy)| GpuBusy { device, busy, span })
            .collect()
    }

    /// Whether each op waited for its work on the GPU (`profile_blocking`).
    pub fn blocking(&self) -> bool {
        self.blocking
    }
}
