//! The recorder: what the layers report while `profile` runs (ops opening and closing, blocks
//! handed out and taken back, the phase), kept for the profiling thread only.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::gpu::{self, Finish, GpuClock, Origin, Pending};
use super::{MadeBlock, MemoryPoint, OpRecord, Peak, Phase, Profile, Work};
use crate::base::dtype::DType;
use crate::base::op::Op;
use crate::cost::gpus::GpuSpec;
use crate::device::error::Result;
use crate::device::{Device, DeviceKind};

pub(super) static RECORDING: AtomicBool = AtomicBool::new(false);
static STATE: Mutex<Option<Recording>> = Mutex::new(None);

pub(super) fn lock() -> MutexGuard<'static, Option<Recording>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) struct Recording {
    /// Which recording this is (a stream's mark from another one means nothing here).
    pub(super) id: u64,
    pub(super) start: Instant,
    /// The measured time of everything recorded so far (what a frame subtracts).
    pub(super) recorded: Duration,
    /// The blocks made while recording and not yet freed, by device and block id.
    live: std::collections::HashMap<(Device, u64), MadeBlock>,
    pub(super) phase: Phase,
    grad_fn: Option<Op>,
    /// The GPU ops whose CUDA events are still to be read, and how to wait for their devices.
    pending: std::collections::VecDeque<Pending>,
    clocks: std::collections::BTreeMap<Device, GpuClock>,
    /// Each GPU's first event, recorded as its first op began.
    origins: std::collections::BTreeMap<Device, Origin>,
    pub(super) profile: Profile,
}

impl Recording {
    /// A recording whose times count from `start`, the instant the profiled code's wall time
    /// starts from too.
    pub(super) fn new(start: Instant) -> Recording {
        static RECORDINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Recording {
            id: RECORDINGS.fetch_add(1, Ordering::Relaxed),
            start,
            recorded: Duration::ZERO,
            live: Default::default(),
            phase: Phase::Forward,
            grad_fn: None,
            pending: Default::default(),
            clocks: Default::default(),
            origins: Default::default(),
            profile: Profile::default(),
        }
    }

    /// The profile, once the code returned `wall` after the start: each GPU it used is waited
    /// for once, and the CUDA events of its ops are read.
    pub(super) fn finish(mut self, wall: Duration, failure: Option<String>) -> Profile {
        let used_gpu = !self.clocks.is_empty();
        gpu::settle(
            &mut self.profile.ops,
            self.pending,
            &self.clocks,
            &self.origins,
        );
        Profile {
            wall,
            gpu_done: used_gpu.then(|| self.start.elapsed()),
            failure,
            blocking: BLOCKING.with(|b| b.get()),
            ..self.profile
        }
    }
}

/// Whether a profile is recording on this thread (the one that called `profile`: ops and
/// blocks of other threads, a test running beside it say, are not its code's).
pub fn recording() -> bool {
    RECORDING.load(Ordering::Relaxed) && PROFILING_THREAD.with(|p| p.get())
}

thread_local! {
    /// The GPU `profile_as` prices a GPU's ops as, while it runs.
    pub(super) static PRICED_AS: std::cell::Cell<Option<&'static GpuSpec>> = const { std::cell::Cell::new(None) };
    pub(super) static PROFILING_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether each GPU op waits for its work (`profile_blocking`), while it runs.
    static BLOCKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Inside `unpriced`: ops are timed but predict nothing.
    static UNPRICED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with its ops predicting nothing: host work a simulated device does that a GPU does
/// another way, priced already by the op around it (`addmm`'s bias, which a GPU adds in the
/// GEMM's epilogue and a simulated one copies into the output first).
pub(crate) fn unpriced<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            UNPRICED.with(|u| u.set(self.0));
        }
    }
    let _restore = Restore(UNPRICED.with(|u| u.replace(true)));
    f()
}

/// Runs `f` on the recording, if one is running.
pub(super) fn with_recording(f: impl FnOnce(&mut Recording)) {
    if recording()
        && let Some(rec) = lock().as_mut()
    {
        f(rec)
    }
}

/// The op this thread is inside, if any: the outermost one is the one recorded.
pub(super) struct OpenOp {
    depth: usize,
    op: Op,
    allocated: u64,
    freed: u64,
    /// What the op and the ops inside it would take on the named GPU.
    predicted: Option<Duration>,
}

thread_local! {
    pub(super) static OPEN: RefCell<Option<OpenOp>> = const { RefCell::new(None) };
}

/// An op being timed; recorded when it is dropped. `None` from `begin` while nothing records.
pub struct OpScope {
    outermost: bool,
    op: Op,
    device: Device,
    /// The named GPU the device stands for, if it is a simulated one that does.
    stands_for: Option<&'static GpuSpec>,
    /// The stream it was queued on.
    stream: u32,
    /// For a copy: the device it reads from.
    copied_from: Option<Device>,
    start: Instant,
    /// On a GPU, the outermost op's: how its device is timed, and what records the closing
    /// CUDA event behind its work.
    gpu: Option<(GpuClock, Finish)>,
}

/// Starts timing the op `name` on `device`, if a profile is recording. Ops inside it (the
/// kernels of a tensor op, a copy a cast makes) are part of it: it is recorded once, with its
/// own time and the predicted times of everything inside added up. `gpu` (for a GPU) records a
/// CUDA event on its stream now and another behind the op's work when it ends; the host time
/// ends there too, without waiting for that work, unless the profile is a blocking one.
pub fn begin(op: Op, device: Device, work: Work, gpu: Option<GpuClock>) -> Option<OpScope> {
    if !recording() {
        return None;
    }
    let named = device.kind().ok().and_then(DeviceKind::stands_for);
    let stands_for = named.or_else(|| PRICED_AS.with(|p| p.get()).filter(|_| device.is_cuda()));
    let priced = !UNPRICED.with(|u| u.get());
    let predicted = stands_for
        .filter(|_| priced)
        .and_then(|gpu| work.predict(gpu));
    let outermost = OPEN.with(|o| {
        let mut o = o.borrow_mut();
        match o.as_mut() {
            Some(open) => {
                open.depth += 1;
                open.add_predicted(predicted);
                false
            }
            None => {
                *o = Some(OpenOp {
                    depth: 1,
                    op,
                    allocated: 0,
                    freed: 0,
                    predicted,
                });
                true
            }
        }
    });
    // The host clock starts before the first event is recorded: the GPU's time lies inside it.
    let start = Instant::now();
    let gpu = gpu.filter(|_| outermost).map(|clock| {
        record_origin(device, clock);
        (clock, (clock.start)(device))
    });
    Some(OpScope {
        outermost,
        op,
        device,
        stands_for,
        stream: crate::device::current_stream::current(device),
        copied_from: None,
        start,
        gpu,
    })
}

/// Records `device`'s origin event, at its first op in the profile.
fn record_origin(device: Device, clock: GpuClock) {
    with_recording(|rec| {
        if rec.origins.contains_key(&device) {
            return;
        }
        if let Some(event) = (clock.origin)(device) {
            let at = rec.start.elapsed();
            rec.origins.insert(device, Origin { event, at });
        }
    });
}

impl OpenOp {
    fn add_predicted(&mut self, predicted: Option<Duration>) {
        if let Some(p) = predicted {
            self.predicted = Some(self.predicted.unwrap_or_default() + p);
        }
    }
}

impl OpScope {
    /// The named GPU the op is priced for: the one its simulated device stands for, or the one
    /// `profile_as` prices a GPU's ops as.
    pub fn priced_for(&self) -> Option<&'static GpuSpec> {
        self.stands_for
    }

    /// Marks the op as a copy from `from` to its device.
    pub fn copying_from(&mut self, from: Device) {
        self.copied_from = Some(from);
    }

    /// Adds what the op would take on the named GPU, once known (a copy's prediction).
    pub fn add_predicted(&mut self, predicted: Option<Duration>) {
        OPEN.with(|o| {
            if let Some(open) = o.borrow_mut().as_mut() {
                open.add_predicted(predicted)
            }
        });
    }
}

impl Drop for OpScope {
    fn drop(&mut self) {
        if !self.outermost {
            OPEN.with(|o| {
                if let Some(open) = o.borrow_mut().as_mut() {
                    open.depth -= 1;
                }
            });
            return;
        }
        // The closing event goes behind the op's work at once. A blocking profile then waits for
        // that work, so the host time includes it, and reads the events; otherwise they are read
        // once the code has returned.
        let blocking = BLOCKING.with(|b| b.get());
        let mut pending = None;
        let mut gpu_time = None;
        if let Some((clock, finish)) = self.gpu.take() {
            let events = finish();
            if blocking {
                let _ = (clock.wait)(self.device);
                gpu_time = events;
            } else {
                pending = events.map(|e| (clock, e));
            }
        }
        let measured = self.start.elapsed();
        let open = OPEN.with(|o| o.borrow_mut().take());
        let (allocated, freed, predicted) = open
            .map(|o| (o.allocated, o.freed, o.predicted))
            .unwrap_or_default();
        with_recording(|rec| {
            let record = OpRecord {
                op: self.op,
                phase: rec.phase,
                grad_fn: rec.grad_fn,
                device: self.device,
                start: self.start.saturating_duration_since(rec.start),
                measured,
                gpu_time: None,
                gpu_start: None,
                stream: self.stream,
                copied_from: self.copied_from,
                predicted,
                allocated,
                freed,
            };
            if let Some(gpu) = self.stands_for {
                rec.profile.stands_for.insert(self.device, gpu);
            }
            rec.recorded += measured;
            let op = rec.profile.ops.len();
            if let Some((clock, time)) = pending.take() {
                rec.clocks.insert(self.device, clock);
                rec.pending.push_back(Pending { op, time });
            }
            rec.profile.ops.push(record);
            if let Some(time) = gpu_time.take() {
                // Blocking: read at once, against the device's origin.
                rec.pending.push_front(Pending { op, time });
                gpu::read_reached(&mut rec.profile.ops, &mut rec.pending, &rec.origins);
            }
            if rec.pending.len() > gpu::READ_REACHED_BEYOND {
                gpu::read_reached(&mut rec.profile.ops, &mut rec.pending, &rec.origins);
            }
        });
    }
}

/// Sets the phase ops are recorded under until the guard drops (then the one before returns).
pub struct PhaseGuard(Option<(Phase, Option<Op>)>);

/// Ops after this belong to `phase` (`backward()` and the optimizers' `step` set it).
pub fn phase(phase: Phase) -> PhaseGuard {
    let mut previous = None;
    with_recording(|rec| {
        previous = Some((rec.phase, rec.grad_fn));
        rec.phase = phase;
    });
    PhaseGuard(previous)
}

/// Ops after this ran for the backward of the op `grad_fn` (`matmul`), until the guard drops.
pub fn grad_fn(grad_fn: Op) -> PhaseGuard {
    let mut previous = None;
    with_recording(|rec| {
        previous = Some((rec.phase, rec.grad_fn));
        rec.grad_fn = Some(grad_fn);
    });
    PhaseGuard(previous)
}

impl Drop for PhaseGuard {
    fn drop(&mut self) {
        if let Some((phase, grad_fn)) = self.0 {
            with_recording(|rec| {
                rec.phase = phase;
                rec.grad_fn = grad_fn;
            });
        }
    }
}

/// The block `id` of `block` bytes that `device`'s allocator handed out (for `numel` of `dtype`,
/// or for an engine buffer); `allocated` is the device's allocated bytes after it.
pub fn block_allocated(
    device: Device,
    (id, block): (u64, usize),
    (dtype, numel): (DType, usize),
    engine_buffer: Option<&'static str>,
    allocated: usize,
) {
    if !recording() {
        return;
    }
    let op = OPEN.with(|o| {
        o.borrow_mut().as_mut().map(|open| {
            open.allocated += block as u64;
            open.op
        })
    });
    with_recording(|rec| {
        let at = rec.start.elapsed();
        let made = MadeBlock {
            bytes: block as u64,
            dtype,
            numel,
            op,
            phase: rec.phase,
            grad_fn: rec.grad_fn,
            engine_buffer,
        };
        rec.live.insert((device, id), made.clone());
        let p = &mut rec.profile;
        p.start_allocated
            .entry(device)
            .or_insert((allocated - block) as u64);
        p.memory.push(MemoryPoint {
            at,
            device,
            allocated: allocated as u64,
        });
        if op.is_none() {
            *p.allocated_between_ops.entry(rec.phase).or_default() += block as u64;
        }
        let higher = p
            .peaks
            .get(&device)
            .is_none_or(|peak| allocated as u64 > peak.allocated);
        if higher {
            // Largest first; blocks of one size in the order they were made (ids grow).
            let mut held: Vec<(u64, MadeBlock)> = rec
                .live
                .iter()
                .filter(|((d, _), _)| *d == device)
                .map(|((_, id), b)| (*id, b.clone()))
                .collect();
            held.sort_by_key(|(id, b)| (std::cmp::Reverse(b.bytes), *id));
            let held = held.into_iter().map(|(_, b)| b).collect();
            p.peaks.insert(
                device,
                Peak {
                    device,
                    allocated: allocated as u64,
                    at,
                    reached_by: made,
                    held,
                },
            );
        }
    });
}

/// The block `id` of `block` bytes that `device`'s allocator took back; `allocated` is what
/// remains.
pub fn block_freed(device: Device, (id, block): (u64, usize), allocated: usize) {
    if !recording() {
        return;
    }
    let in_op = OPEN.with(|o| {
        o.borrow_mut()
            .as_mut()
            .map(|open| open.freed += block as u64)
    });
    with_recording(|rec| {
        let at = rec.start.elapsed();
        rec.live.remove(&(device, id));
        let p = &mut rec.profile;
        p.start_allocated
            .entry(device)
            .or_insert((allocated + block) as u64);
        p.memory.push(MemoryPoint {
            at,
            device,
            allocated: allocated as u64,
        });
        if in_op.is_none() {
            *p.freed_between_ops.entry(rec.phase).or_default() += block as u64;
        }
    });
}

/// `profile`, with every op on a CUDA device (real or emulated too) priced as if it ran on
/// `gpu`: how `benches/gpu-check.sh` holds the cost model against a real GPU's CUDA events.
/// A learner's profile predicts only for simulated devices standing for a GPU.
pub fn profile_as<T>(gpu: &'static GpuSpec, f: impl FnOnce() -> Result<T>) -> Profile {
    PRICED_AS.with(|p| p.set(Some(gpu)));
    let profile = profile(f);
    PRICED_AS.with(|p| p.set(None));
    profile
}

/// `profile`, with each op on a GPU (real or emulated) waiting for its work before its host time
/// ends, as every op does under `CUDA_LAUNCH_BLOCKING=1`: each host time then includes the op's
/// GPU time, and the GPU idles while the host queues the next op, so the step takes longer than
/// it does unprofiled and its balance between host and GPU is not the step's own.
pub fn profile_blocking<T>(f: impl FnOnce() -> Result<T>) -> Profile {
    if lock().is_some() {
        return profile(f); // inside another profile: says that profiles do not nest
    }
    BLOCKING.with(|b| b.set(true));
    let profile = profile(f);
    BLOCKING.with(|b| b.set(false));
    profile
}

/// Runs `f` once and records where its time and memory went. A failure (an error or a panic)
/// ends the recording there and is reported with the ops before it; whatever `f` freed is freed.
/// The value `f` returns is dropped after the recording ends, so what it holds shows as still
/// allocated at the end of the timeline; `profile_value` keeps it.
///
/// On a GPU (real or emulated) no op waits for its work: each op's host time is its call's, the
/// work only queued, as the step runs unprofiled. CUDA events around each op's work are read
/// once `f` has returned (or failed), after one wait for each GPU it used, and give the op's
/// GPU time; `profile_blocking` makes every op wait instead.
pub fn profile<T>(f: impl FnOnce() -> Result<T>) -> Profile {
    profile_outcome(f).0
}

/// `profile`, keeping what `f` gave beside the profile: its value, or its error (which the
/// profile also gives, with the ops before it), as `torch.profiler.profile` lets the code's
/// exception through. A panic in `f` goes on unwinding once the recording has ended.
pub fn profile_value<T>(f: impl FnOnce() -> Result<T>) -> (Profile, Result<T>) {
    let (profile, outcome) = profile_outcome(f);
    match outcome {
        Ok(value) => (profile, value),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// `profile_value` with `f`'s panic caught rather than resumed, for a caller that shows the
/// profile first (`show::profiled`, what `:profile` runs).
pub(crate) fn profile_outcome<T>(
    f: impl FnOnce() -> Result<T>,
) -> (Profile, std::thread::Result<Result<T>>) {
    let mut state = lock();
    if state.is_some() {
        drop(state);
        let value = f();
        let failure = match &value {
            Ok(_) => "profiles do not nest: the outer profile recorded this code's ops".into(),
            Err(e) => e.to_string(),
        };
        let profile = Profile {
            failure: Some(failure),
            ..Profile::default()
        };
        return (profile, Ok(value));
    }
    // The ops', the blocks' and the wall time count from one instant, so that nothing the
    // code did is placed after its end (`cpu_wait` reads a /proc file: 66-215 µs in the profiles
    // that were placed late by it).
    let waited_before = cpu_wait();
    let start = Instant::now();
    *state = Some(Recording::new(start));
    PROFILING_THREAD.with(|p| p.set(true));
    RECORDING.store(true, Ordering::SeqCst);
    drop(state);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let wall = start.elapsed();
    let waited = cpu_wait()
        .zip(waited_before)
        .map(|(after, before)| after.saturating_sub(before));
    RECORDING.store(false, Ordering::SeqCst);
    PROFILING_THREAD.with(|p| p.set(false));
    OPEN.with(|o| o.borrow_mut().take());
    let rec = lock().take().expect("the recording started above");
    let profile = Profile {
        cpu_wait: waited,
        ..rec.finish(wall, failure_of(&outcome))
    };
    (profile, outcome)
}

/// What the profile says of the code's end: nothing when it returned a value, else its error or
/// its panic's message.
fn failure_of<T>(outcome: &std::thread::Result<Result<T>>) -> Option<String> {
    match outcome {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(panic) => Some(format!(
            "panicked: {}",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)")
        )),
    }
}

/// How long this thread has waited, runnable, for a CPU core since it started (the second field
/// of Linux's `/proc/thread-self/schedstat`): time a busy machine took from the code's wall time.
/// `None` where the kernel does not keep it.
fn cpu_wait() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos = stat.split_whitespace().nth(1)?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}
