//! What a `.to()` leaves behind: the `Transfer` record (where from, where to, how much, how long,
//! how it was measured), the session's transfer log, and the copies still in flight after a
//! non-blocking `.to()` (`inflight.rs`). The copy itself is `Tensor::to` (`tensor/to.rs`).

pub(crate) mod inflight;
pub mod predicted;

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

pub use inflight::pending;
pub use predicted::PredictedCopy;

use crate::base::dtype::DType;
use crate::device::{Device, DeviceKind};

/// How a simulated GPU's transfer time was measured, wherever a time is shown: a host copy, not
/// a bus transfer.
pub const SIMULATED_CLOCK_NOTE: &str = "simulated: host copy time";

/// How an emulated GPU's transfer time was measured: host timestamps around a host copy run in
/// its stream's order, not a bus transfer.
pub const EMULATED_CLOCK_NOTE: &str = "emulated: host copy time";

/// Host memory a transfer read from or wrote to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostMemoryKind {
    /// Ordinary (pageable) memory: the driver stages it through a pinned buffer.
    Pageable,
    /// Page-locked memory (`pin_memory()`): the copy engine reads it directly.
    Pinned,
}

/// How a transfer's duration was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Clock {
    /// CUDA events recorded around the copy on its stream.
    CudaEvents,
    /// A host clock around the whole copy.
    #[default]
    Host,
    /// A host clock around a host-memory copy standing in for a simulated GPU's transfer: a real
    /// PCIe copy would take a different time.
    SimulatedHostCopy,
    /// An emulated GPU's events: host timestamps when its stream reached them, around a host
    /// copy. A real PCIe copy would take a different time.
    EmulatedEvents,
}

impl Clock {
    /// How a copy between devices of these kinds is timed: by the clock of the GPU it involves,
    /// the host's between CPU buffers (a process never mixes real and stand-in GPUs).
    pub(crate) fn timing(kinds: [DeviceKind; 2]) -> Clock {
        let clock = |kind| match kind {
            DeviceKind::Cpu => Clock::Host,
            DeviceKind::Gpu => Clock::CudaEvents,
            DeviceKind::EmulatedGpu { .. } => Clock::EmulatedEvents,
            DeviceKind::SimulatedGpu { .. } => Clock::SimulatedHostCopy,
        };
        let mut gpu = kinds.into_iter().map(clock).filter(|c| *c != Clock::Host);
        gpu.next().unwrap_or(Clock::Host)
    }

    /// The word of the stand-in device whose copy this clock timed (`simulated`, `emulated`),
    /// if any: its time is a host copy's.
    pub fn stand_in_word(self) -> Option<&'static str> {
        match self {
            Clock::SimulatedHostCopy => Some("simulated"),
            Clock::EmulatedEvents => Some("emulated"),
            Clock::CudaEvents | Clock::Host => None,
        }
    }

    /// How a stand-in device's transfer time was measured (`simulated: host copy time`), for
    /// every place that shows such a time; `None` for a real clock.
    pub fn stand_in_note(self) -> Option<&'static str> {
        match self {
            Clock::SimulatedHostCopy => Some(SIMULATED_CLOCK_NOTE),
            Clock::EmulatedEvents => Some(EMULATED_CLOCK_NOTE),
            Clock::CudaEvents | Clock::Host => None,
        }
    }
}

/// How a copy between two GPUs travelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerCopy {
    /// Straight from one GPU's memory to the other's (NVLink or PCIe peer to peer).
    Direct,
    /// Through host memory, staged by the driver: the GPUs cannot reach each other's memory.
    StagedThroughHost,
}

/// Whether `.to()` waited for its copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyMode {
    /// `.to()`: returned once the copy had finished.
    Blocking,
    /// `.to_non_blocking()`: returned as soon as the copy was queued; the host went on while
    /// the copy ran.
    NonBlocking,
    /// `.to_non_blocking()` from pageable memory: the copy had finished by the time it
    /// returned, because pageable memory is staged through the driver's own pinned buffer
    /// first (as in PyTorch). `pin_memory()` the source to overlap.
    NonBlockingFromPageable,
}

/// One completed `.to()`: where from, where to, how much, how long, and how it was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Transfer {
    /// Position in the session's log (1 for the first transfer of the process).
    pub seq: u64,
    pub from: Device,
    pub to: Device,
    pub bytes: usize,
    /// The copy's time: between CUDA events on a real GPU, else the host clock.
    pub duration: Duration,
    /// Host clock from the call to the copy's completion: what the user waited for (on a real
    /// GPU it includes the driver's staging of pageable memory and the launch latency).
    pub wall: Duration,
    /// The one-time CUDA context creation this `.to()` triggered: paid before the copy started
    /// and never part of `duration` or `wall`.
    pub context_setup: Option<Duration>,
    pub memory: HostMemoryKind,
    pub clock: Clock,
    /// Whether the call waited for the copy. For a non-blocking copy `wall` is how long the
    /// call took to queue it.
    pub mode: CopyMode,
    /// Between two GPUs (real or emulated): the way the copy went.
    pub between_gpus: Option<PeerCopy>,
    /// On a simulated device standing for a named GPU: what the copy would take there.
    pub predicted: Option<PredictedCopy>,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl Transfer {
    /// Bytes per second over the measured time.
    pub fn bandwidth(&self) -> f64 {
        let s = self.duration.as_secs_f64();
        if s > 0.0 {
            self.bytes as f64 / s
        } else {
            f64::INFINITY
        }
    }

    /// `cpu → cuda:0`.
    pub fn route(&self) -> String {
        format!("{} → {}", self.from, self.to)
    }
}

/// `cpu → cuda:0, 0.41 ms (9.7 GB/s, pageable)`, with `simulated` when it was.
impl fmt::Display for Transfer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mem = match (self.between_gpus, self.memory) {
            (Some(PeerCopy::Direct), _) => "peer to peer",
            (Some(PeerCopy::StagedThroughHost), _) => "staged through host memory",
            // A simulated GPU's memory is host memory: no route to name.
            (None, _) if self.from.is_cuda() && self.to.is_cuda() => "between GPUs",
            (None, HostMemoryKind::Pageable) => "pageable",
            (None, HostMemoryKind::Pinned) => "pinned",
        };
        let clock = match self.clock.stand_in_note() {
            Some(note) => format!(", {note}"),
            None => match self.clock {
                // Waiting noticeably longer than the copy ran: pageable staging or launch latency.
                Clock::CudaEvents
                    if self.mode == CopyMode::Blocking
                        && self.wall > self.duration.mul_f64(1.2) =>
                {
                    format!(", waited {}", crate::base::units::human_duration(self.wall))
                }
                _ => String::new(),
            },
        };
        let clock = match self.mode {
            CopyMode::Blocking => clock,
            CopyMode::NonBlocking => format!(
                "{clock}, non-blocking: .to() returned after {}",
                crate::base::units::human_duration(self.wall)
            ),
            CopyMode::NonBlockingFromPageable => format!(
                "{clock}, non-blocking had no effect from pageable memory: pin_memory() first"
            ),
        };
        write!(
            f,
            "{}, {} ({}, {mem}{clock})",
            self.route(),
            crate::base::units::human_duration(self.duration),
            crate::base::units::human_rate(self.bandwidth())
        )?;
        if let Some(p) = &self.predicted {
            write!(
                f,
                "; ≈ {} on {} (predicted: {})",
                crate::base::units::human_duration(p.duration),
                p.gpu.with_article(),
                p.link
            )?;
            if let Some(m) = &p.measured {
                write!(
                    f,
                    "; placelab measured {} for {} there on {} (the model: {:+.0}%)",
                    crate::base::units::human_duration(m.duration),
                    crate::base::units::human_bytes(m.bytes as usize),
                    m.date,
                    100.0 * m.model_error
                )?;
            }
        }
        if let Some(setup) = self.context_setup {
            write!(
                f,
                "; creating the GPU's CUDA context took {} more, once per process, not in this time",
                crate::base::units::human_duration(setup)
            )?;
        }
        Ok(())
    }
}

const LOG_CAPACITY: usize = 100_000;

fn log_store() -> &'static Mutex<(u64, VecDeque<Transfer>)> {
    static LOG: OnceLock<Mutex<(u64, VecDeque<Transfer>)>> = OnceLock::new();
    LOG.get_or_init(Default::default)
}

/// What `t` would take on the named GPU its simulated device stands for, if it stands for one
/// (only a simulated device's host copy does).
pub(crate) fn prediction(t: &Transfer) -> Option<PredictedCopy> {
    let pinned = t.memory == HostMemoryKind::Pinned;
    let waits = t.mode != CopyMode::NonBlocking;
    (t.clock == Clock::SimulatedHostCopy)
        .then(|| predicted::of(t.from, t.to, t.bytes, pinned, waits))
        .flatten()
}

pub(crate) fn record(mut t: Transfer) -> Transfer {
    // Outside the log's lock: the first prediction measures the host's memcpy. Only a simulated
    // device's host copy stands for a named GPU's.
    t.predicted = prediction(&t);
    let mut log = log_store().lock().unwrap_or_else(|e| e.into_inner());
    log.0 += 1;
    t.seq = log.0;
    if log.1.len() == LOG_CAPACITY {
        log.1.pop_front();
    }
    log.1.push_back(t.clone());
    t
}

/// Every transfer of this process so far (the most recent 100,000), oldest first.
pub fn log() -> Vec<Transfer> {
    log_store()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .1
        .iter()
        .cloned()
        .collect()
}

/// Transfers with `seq > after`: what a cell did, given the last `seq` seen before it.
pub fn log_since(after: u64) -> Vec<Transfer> {
    let log = log_store().lock().unwrap_or_else(|e| e.into_inner());
    // `seq` grows along the log: the cell's transfers are its tail.
    let start = log.1.partition_point(|t| t.seq <= after);
    log.1.range(start..).cloned().collect()
}

/// The `seq` of the latest transfer (0 before the first).
pub fn last_seq() -> u64 {
    log_store().lock().unwrap_or_else(|e| e.into_inner()).0
}

pub fn clear_log() {
    log_store()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .1
        .clear();
}
