//! Where a piece of code's time and memory go: `profile(|| …)` runs it once while its ops (each
//! tensor op, or a storage op outside one), the blocks the allocators hand out and take back,
//! and the phase of training (forward, backward, optimizer) are recorded (`record.rs`); the
//! `Profile` it returns holds rows grouped by op (`rows.rs`) and a memory timeline with its peak
//! (`timeline.rs`). It draws nothing itself: `display/` renders its tables and timeline.
//!
//! Recording costs one atomic load per op and per block while no profile runs. An op's host
//! time runs from its call to its return, as torch.profiler's CPU time does. On a GPU (real or
//! emulated) its work is then only queued, as it is unprofiled: CUDA events recorded on the
//! stream before and after that work give its GPU time (torch.profiler's CUDA time), read once
//! the code has returned, after one wait per GPU (`gpu.rs`). Host and GPU times side by side
//! show whether a step is host-bound (the GPU idle, waiting for work to be queued) or GPU-bound.
//! `profile_blocking` makes each op wait for its work instead, as `CUDA_LAUNCH_BLOCKING=1`
//! does: its host time then includes its GPU time. On a simulated device standing for a named
//! GPU each op also carries what the cost model predicts it would take there.

mod frame;
mod gpu;
mod lanes;
mod predicted_lanes;
mod record;
mod rows;
mod timeline;
mod waits;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::base::dtype::DType;
use crate::base::op::Op;
use crate::cost::gpus::GpuSpec;
use crate::cost::model::{self, Access, Arithmetic};
use crate::device::Device;

pub use frame::{Frame, frame};
pub use gpu::{Bound, Finish, GpuBusy, GpuClock, GpuOrigin, GpuTime, PendingGpuTime};
pub use lanes::{CopyDirection, Engine, Lane, Lanes, Span};
pub use record::{
    OpScope, PhaseGuard, begin, block_allocated, block_freed, grad_fn, phase, profile, profile_as,
    profile_blocking, profile_value, recording,
};
pub(crate) use record::{profile_outcome, unpriced};
pub use rows::Row;
pub(crate) use waits::{stream_mark, stream_waited};

#[cfg(test)]
pub(crate) use timeline::tests::example;

/// The part of a training step an op ran in, as PyTorch's profiler groups them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    Forward,
    Backward,
    Optimizer,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
        }
    }
}

/// What an op asks of a device, for the cost model.
#[derive(Debug, Clone, Copy)]
pub enum Work {
    /// Nothing priced here: a tensor op (the storage ops inside it price their kernels) or a
    /// copy (priced once it ran).
    Unpriced,
    /// An element-wise op, a cast or a gather: bytes read and written, and its arithmetic.
    Kernel {
        bytes: u64,
        flops: u64,
        dtype: DType,
    },
    /// A reduction (a sum, a max, a softmax): bytes read and written, and its arithmetic.
    Reduction {
        bytes: u64,
        flops: u64,
        dtype: DType,
    },
    /// `batch` products of `m × k` by `k × n`.
    Matmul {
        dims: (u64, u64, u64, u64),
        dtype: DType,
        tf32: bool,
    },
}

impl Work {
    /// An element-wise op over `numel` outputs that reads `inputs` tensors of the same size.
    pub fn elementwise(numel: usize, inputs: u64, dtype: DType) -> Work {
        let n = numel as u64;
        Work::Kernel {
            bytes: n * (inputs + 1) * dtype.size_in_bytes() as u64,
            flops: n,
            dtype,
        }
    }

    /// A reduction over `numel` values that reads `inputs` tensors of that size and writes one.
    pub fn reduction(numel: usize, inputs: u64, dtype: DType) -> Work {
        match Work::elementwise(numel, inputs, dtype) {
            Work::Kernel {
                bytes,
                flops,
                dtype,
            } => Work::Reduction {
                bytes,
                flops,
                dtype,
            },
            other => other,
        }
    }

    fn predict(self, gpu: &GpuSpec) -> Option<Duration> {
        let arithmetic = |dtype: DType| match dtype {
            DType::F64 => Arithmetic::F64,
            _ => Arithmetic::F32,
        };
        let seconds = match self {
            Work::Unpriced => return None,
            Work::Kernel {
                bytes,
                flops,
                dtype,
            } => model::kernel(
                gpu,
                Access::Streaming,
                bytes,
                flops as f64,
                arithmetic(dtype),
            ),
            Work::Reduction {
                bytes,
                flops,
                dtype,
            } => model::kernel(
                gpu,
                Access::Reduction,
                bytes,
                flops as f64,
                arithmetic(dtype),
            ),
            Work::Matmul { dims, dtype, tf32 } => model::matmul(
                gpu,
                dims,
                dtype.size_in_bytes() as u64,
                Arithmetic::of_matmul(dtype, tf32),
            ),
        };
        Some(Duration::from_secs_f64(seconds))
    }
}

/// One op as it ran.
#[derive(Debug, Clone)]
pub struct OpRecord {
    pub op: Op,
    pub phase: Phase,
    /// The op whose backward ran it (`matmul`), in the backward phase.
    pub grad_fn: Option<Op>,
    pub device: Device,
    /// When it started, from the start of the profile.
    pub start: Duration,
    /// Host time, from its call to its return (torch.profiler's CPU time). On a GPU its work is
    /// only queued by then, unless the profile is a blocking one (`profile_blocking`), where the
    /// op waited for it.
    pub measured: Duration,
    /// On a GPU (real or emulated): its work's time on the stream, between CUDA events recorded
    /// before and after it (torch.profiler's CUDA time), read once the profiled code returned.
    pub gpu_time: Option<Duration>,
    /// On a GPU: when its work began there, from the start of the profile (the device's first
    /// event in the profile taken as reached when the host recorded it).
    pub gpu_start: Option<Duration>,
    /// The stream it was queued on (`cuda::current_stream` as it began; 0 on the CPU).
    pub stream: u32,
    /// For a copy (`.to()`): the device it read from (`device` is the one it wrote to).
    pub copied_from: Option<Device>,
    /// What it would take on the named GPU the device stands for.
    pub predicted: Option<Duration>,
    /// Bytes of the blocks it took from and gave back to its devices' allocators.
    pub allocated: u64,
    pub freed: u64,
}

impl OpRecord {
    /// An op of the host's alone, from `start` for `measured`: no GPU time, stream, copy,
    /// prediction or memory (a frame's row; the start of a test's record).
    pub(crate) fn on_host(
        op: Op,
        phase: Phase,
        device: Device,
        start: Duration,
        measured: Duration,
    ) -> OpRecord {
        OpRecord {
            op,
            phase,
            grad_fn: None,
            device,
            start,
            measured,
            gpu_time: None,
            gpu_start: None,
            stream: 0,
            copied_from: None,
            predicted: None,
            allocated: 0,
            freed: 0,
        }
    }
}

/// Where a stream's work stood in a recording when an event was recorded on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamMark {
    pub(super) recording: u64,
    pub(super) device: Device,
    pub(super) stream: u32,
    pub(super) ops: usize,
}

/// A stream that waited for another: the ops of `stream` recorded from `from_op` on wait for
/// the ops of `waited` among the first `after` (its work when the event was recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamWait {
    pub device: Device,
    pub stream: u32,
    pub waited: u32,
    pub after: usize,
    pub from_op: usize,
}

/// Allocated bytes of one device just after a block was handed out or taken back.
#[derive(Debug, Clone, Copy)]
pub struct MemoryPoint {
    pub at: Duration,
    pub device: Device,
    pub allocated: u64,
}

/// A block allocated while the profile recorded: its size, what it holds, and the op that made
/// it.
#[derive(Debug, Clone)]
pub struct MadeBlock {
    pub bytes: u64,
    pub dtype: DType,
    pub numel: usize,
    /// The op that allocated it, or `None` for an allocation outside any op.
    pub op: Option<Op>,
    pub phase: Phase,
    /// In the backward phase, the op whose backward made it.
    pub grad_fn: Option<Op>,
    /// What holds the block when it is an engine buffer (the cuBLAS workspace), not a tensor.
    pub engine_buffer: Option<&'static str>,
}

/// The most memory a device held during the profile: when, the block that reached it, and the
/// blocks made by the code that were alive then, largest first.
#[derive(Debug, Clone)]
pub struct Peak {
    pub device: Device,
    /// `memory_allocated` at the peak.
    pub allocated: u64,
    pub at: Duration,
    /// The allocation that reached the peak (often small: the last straw, not the load).
    pub reached_by: MadeBlock,
    /// Every block the code made that was alive at the peak: largest first, then oldest first.
    pub held: Vec<MadeBlock>,
}

/// What `profile` recorded: the ops, the memory timeline, each device's peak, and whether the
/// code finished.
#[derive(Debug, Clone, Default)]
pub struct Profile {
    ops: Vec<OpRecord>,
    memory: Vec<MemoryPoint>,
    peaks: BTreeMap<Device, Peak>,
    /// Each device's allocated bytes when the profile started (known for those it touched).
    start_allocated: BTreeMap<Device, u64>,
    /// Blocks taken back outside any op (temporaries dropped between ops), per phase.
    freed_between_ops: BTreeMap<Phase, u64>,
    allocated_between_ops: BTreeMap<Phase, u64>,
    wall: Duration,
    /// How much of `wall` the code's thread spent waiting for a CPU core, other work having them
    /// (`None` where the OS does not say).
    cpu_wait: Option<Duration>,
    /// From the start of the code until the work it queued on its GPUs was done, if it used one.
    gpu_done: Option<Duration>,
    /// Whether each GPU op waited for its work (`profile_blocking`).
    blocking: bool,
    stands_for: BTreeMap<Device, &'static GpuSpec>,
    /// The waits of one stream for another's work (`wait_stream`, `Event::wait`) made while the
    /// code ran, which a predicted timeline keeps.
    waits: Vec<StreamWait>,
    failure: Option<String>,
}

impl Profile {
    /// Every op, in the order they ran.
    pub fn ops(&self) -> &[OpRecord] {
        &self.ops
    }

    /// The code's wall time, from the first instruction to its return.
    pub fn wall(&self) -> Duration {
        self.wall
    }

    /// How much of the wall time the code's thread waited for a CPU core while other work had
    /// them: on a busy machine, time neither the ops nor the code between them ran.
    pub fn cpu_wait(&self) -> Option<Duration> {
        self.cpu_wait
    }

    /// The ops' measured (host) times added up.
    pub fn ops_total(&self) -> Duration {
        self.ops.iter().map(|o| o.measured).sum()
    }

    /// The ops' measured times in one phase.
    pub fn phase_total(&self, phase: Phase) -> Duration {
        self.ops
            .iter()
            .filter(|o| o.phase == phase)
            .map(|o| o.measured)
            .sum()
    }

    /// What the ops would take on the named GPUs their devices stand for (`None` when no op ran
    /// on such a device).
    pub fn predicted_total(&self) -> Option<Duration> {
        let mut priced = self.ops.iter().filter_map(|o| o.predicted).peekable();
        priced.peek()?;
        Some(priced.sum())
    }

    /// What the code would take on the named GPU its devices stand for: the host queues the
    /// priced ops while the GPU runs their kernels, so it takes the larger of the host's time
    /// and the GPU's, and the prediction says which binds (`None` when no op ran on such a
    /// device). The host's time is priced per op queued (`model::Constants::step_op`).
    pub fn predicted_step(&self) -> Option<model::StepPrediction> {
        self.predicted_total()?;
        let priced: Vec<(&OpRecord, f64)> = (self.ops.iter())
            .filter_map(|o| Some((o, o.predicted?.as_secs_f64())))
            .collect();
        // A blocking `.to()` keeps the host waiting for its copy, and for the driver call and
        // the wake-up around it; a non-blocking one costs the host its queueing, as a lone op's
        // dispatch. Each kernel costs the host its share of the step, and queues on the GPU.
        let c = model::FITTED;
        let host_waits = priced.iter().filter_map(|(o, p)| match o.op {
            Op::To => Some(p + c.blocking_copy_host),
            Op::ToNonBlocking => Some(c.host_op),
            _ => None,
        });
        let blocking = |o: &OpRecord| o.op == Op::To;
        let kernels = priced.iter().filter(|(o, _)| !blocking(o));
        let gpu = kernels.clone().map(|p| model::queued(p.1)).sum();
        let ops = kernels.filter(|(o, _)| o.op != Op::ToNonBlocking).count();
        Some(model::step(ops, host_waits.sum(), gpu))
    }

    /// The peak of `device`'s allocated bytes during the profile, if it allocated anything.
    pub fn peak(&self, device: &Device) -> Option<&Peak> {
        self.peaks.get(device)
    }

    /// The allocated-bytes timeline, every change, in order.
    pub fn memory(&self) -> &[MemoryPoint] {
        &self.memory
    }

    /// Why the code stopped, if it failed (the ops before the failure are still recorded).
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// The devices whose memory moved, in order.
    pub fn devices(&self) -> Vec<Device> {
        self.start_allocated.keys().copied().collect()
    }

    /// Each device's peak, by device.
    pub(crate) fn peaks(&self) -> &BTreeMap<Device, Peak> {
        &self.peaks
    }

    /// `device`'s allocated bytes when the profile started (0 for a device it did not touch).
    pub(crate) fn start_allocated(&self, device: &Device) -> u64 {
        self.start_allocated.get(device).copied().unwrap_or(0)
    }

    /// What `phase` allocated and freed outside any op, where it did: (allocated, freed).
    pub fn outside_ops(&self, phase: Phase) -> (Option<u64>, Option<u64>) {
        let bytes = |m: &BTreeMap<Phase, u64>| m.get(&phase).copied();
        (
            bytes(&self.allocated_between_ops),
            bytes(&self.freed_between_ops),
        )
    }

    /// The named GPU each predicting device stands for.
    pub(crate) fn stands_for(&self) -> &BTreeMap<Device, &'static GpuSpec> {
        &self.stands_for
    }
}
