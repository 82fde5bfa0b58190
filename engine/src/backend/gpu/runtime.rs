//! One CUDA device as the engine uses it: the driver behind it (a real GPU's, or the emulator's;
//! `driver.rs` is the seam), created on first use and timed, since that one-time cost must never
//! be counted as a transfer; the cuBLAS workspace taken at its first GEMM; and the raw allocator
//! under the caching allocator. Work is queued on the calling thread's current stream of the
//! device; the waits here for the device (`wait_interruptibly`, a cell's end) wait for every
//! stream, and a blocking read's (`wait_current_interruptibly`) for the current one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::args::Arg;
use super::call::{DriverError, DriverResult as DriverResultOf, Grid};
use super::checks::Checks;
use super::cuda_driver::CudaDriver;
use super::driver::{Driver, Event};
use super::emulated::EmulatedDriver;
use super::nvrtc::KernelSource;
use crate::backend::alloc::caching::{PendingUse, RawAllocator};
use crate::device::current_stream::{STREAMS_PER_POOL, StreamId};
use crate::device::error::{Error, Reported, Result};
use crate::device::per_device::PerDevice;
use crate::device::{Device, DeviceKind};

pub(crate) struct Gpu {
    pub index: usize,
    pub driver: Driver,
    /// Compute capability, e.g. (9, 0) for an H100.
    pub cc: (i32, i32),
    /// How long creating the context took (the first use of the device in this process).
    pub context_setup: Duration,
    /// cuBLAS's workspace, taken at the first GEMM.
    pub(super) workspace: Mutex<Option<Workspace>>,
    /// For each device this one has copied to: whether the copies go peer to peer.
    peers: Mutex<HashMap<usize, bool>>,
    /// Index checks kernels make as they run, read at the host's next wait (`checks.rs`).
    pub(super) checks: Mutex<Checks>,
    /// The events `wait_interruptibly` records and polls, one per stream, kept between waits
    /// (creating and destroying one per wait cost every `item()` two more driver calls).
    idle_events: Mutex<Vec<Event>>,
}

/// Device memory for cuBLAS: its address, its size, and what keeps it allocated.
pub(super) type Workspace = (u64, usize, Box<dyn Send>);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Each opened device's driver, by index, made again once the stand-ins made it another.
static GPUS: PerDevice<usize, Arc<Gpu>> = PerDevice::new();

/// The context setup times not yet reported, taken by the first transfer that follows.
fn unreported_setups() -> &'static Mutex<Vec<(usize, Duration)>> {
    static S: OnceLock<Mutex<Vec<(usize, Duration)>>> = OnceLock::new();
    S.get_or_init(Default::default)
}

/// `cuda:index` ready for work, its driver (a real GPU's context) created on first use, and again
/// after a change of the stand-ins made the device another.
pub(crate) fn gpu(index: usize) -> Result<Arc<Gpu>> {
    let device = Device::Cuda(index);
    GPUS.get_or_make(
        index,
        device,
        |kind| open(index, kind),
        |stale| give_back_workspace(&stale),
    )
}

/// A new driver for `cuda:index`, of `kind` (a real GPU's context, or an emulated device).
fn open(index: usize, kind: DeviceKind) -> Result<Arc<Gpu>> {
    let device = Device::Cuda(index);
    let unavailable = |reason: String| Error::DeviceUnavailable { device, reason };
    let start = Instant::now();
    let driver = match kind {
        DeviceKind::Gpu => {
            // NVRTC and cuBLAS from `PLACELAB_CUDA_LIB_DIRS` must be loaded before cudarc looks
            // them up by name, whichever of them the device's first op needs.
            super::libs::preload();
            Driver::Cuda(CudaDriver::new(index).map_err(|e| unavailable(e.to_string()))?)
        }
        DeviceKind::EmulatedGpu { capacity } => {
            Driver::Emulated(EmulatedDriver::new(index, capacity))
        }
        DeviceKind::SimulatedGpu { .. } | DeviceKind::Cpu => {
            return Err(unavailable(
                "a simulated device runs the CPU kernels, not the CUDA backend".into(),
            ));
        }
    };
    let context_setup = start.elapsed();
    let g = Arc::new(Gpu {
        index,
        cc: driver.compute_capability(),
        driver,
        context_setup,
        workspace: Mutex::default(),
        peers: Mutex::default(),
        checks: Mutex::default(),
        idle_events: Mutex::default(),
    });
    lock(unreported_setups()).push((index, context_setup));
    Ok(g)
}

/// Returns a forgotten device's cuBLAS workspace to its allocator, outside the map's lock:
/// freeing a block may ask for its device.
fn give_back_workspace(g: &Gpu) {
    lock(&g.workspace).take();
}

/// An emulated device of `capacity` bytes outside the registry: for unit tests of kernel paths
/// that no tensor op reaches.
#[cfg(test)]
pub(crate) fn standalone_emulated(capacity: usize) -> Gpu {
    let driver = Driver::Emulated(EmulatedDriver::new(0, capacity));
    Gpu {
        index: 0,
        cc: driver.compute_capability(),
        driver,
        context_setup: Duration::ZERO,
        workspace: Mutex::default(),
        peers: Mutex::default(),
        checks: Mutex::default(),
        idle_events: Mutex::default(),
    }
}

/// Forgets the drivers of stand-ins that a new setting changed (the caller has checked that no
/// tensor lives on them), so that their memory goes back now rather than at their next use. A
/// real GPU's driver stays for the process's life: its context is made once.
pub(crate) fn forget_stale() {
    for g in GPUS.forget_stale(Device::Cuda) {
        give_back_workspace(&g);
    }
}

/// The lowest-numbered device whose driver (context) has been created, if any.
pub(crate) fn first_open() -> Option<usize> {
    GPUS.keys().into_iter().min()
}

/// How long creating `cuda:index`'s context took, if it has been created.
pub fn context_setup_time(index: usize) -> Option<Duration> {
    GPUS.get(&index).map(|g| g.context_setup)
}

/// Context setups of `devices` not reported yet (each is reported once).
pub(crate) fn take_unreported_setup(devices: &[Device]) -> Option<Duration> {
    let mut pending = lock(unreported_setups());
    let mut total = None;
    pending.retain(|(i, d)| {
        let hit = devices.contains(&Device::Cuda(*i));
        if hit {
            *total.get_or_insert(Duration::ZERO) += *d;
        }
        !hit
    });
    total
}

pub(crate) fn driver_error(op: impl Into<&'static str>, index: usize, msg: String) -> Error {
    let op = op.into();
    Error::Cuda {
        op,
        device: Device::Cuda(index),
        msg,
    }
}

impl Gpu {
    pub(crate) fn err(&self, op: impl Into<&'static str>, e: DriverError) -> Error {
        let op = op.into();
        driver_error(op, self.index, e.to_string())
    }

    pub(crate) fn device(&self) -> Device {
        Device::Cuda(self.index)
    }

    /// The most blocks a reduction's grid gets (`reduce.rs`): its kernels walk the rest of the rows
    /// with grid-stride loops. 2^16 fill the largest GPU many times over; emulated devices take
    /// fewer (`emulated::MAX_GRID_BLOCKS`). Element-wise grids keep 2^16 everywhere (`ops.rs`).
    pub(crate) fn max_grid_blocks(&self) -> usize {
        match self.driver {
            Driver::Cuda(_) => 1 << 16,
            Driver::Emulated(_) => super::emulated::MAX_GRID_BLOCKS,
        }
    }

    /// Queues kernel `name` of `source`; `op` names the user's op in errors.
    pub(crate) fn launch(
        &self,
        source: &KernelSource,
        name: &str,
        grid: Grid,
        op: impl Into<&'static str>,
        args: &[Arg],
    ) -> Result<()> {
        let op = op.into();
        // SAFETY: the launchers (`launch.rs`) pass the kernel's parameter kinds, and every
        // pointer is a live block of the device holding the elements its view addresses.
        unsafe { self.driver.launch(source, name, grid, args) }.map_err(|e| self.err(op, e))
    }

    /// Whether copies from this device to `to` go peer to peer, enabling peer access on the
    /// first ask (else the driver stages them through host memory).
    pub(crate) fn peer_to(&self, to: &Gpu) -> Result<bool> {
        let mut peers = lock(&self.peers);
        if let Some(&direct) = peers.get(&to.index) {
            return Ok(direct);
        }
        let direct = self
            .driver
            .enable_peer_access(&to.driver)
            .map_err(|e| self.err("enable peer access", e))?;
        peers.insert(to.index, direct);
        Ok(direct)
    }

    /// Waits for the work queued on the device so far, returning `Error::Interrupted` as soon as
    /// the user interrupts the cell: the work goes on on the device, in order, and the session
    /// keeps its variables. A stream sync cannot be interrupted, so this waits on an event in
    /// slices (`wait_for`), busy for the first 20 ms: sleeping between looks (10 µs doubling to
    /// 200 µs) woke it a median 23 µs late after a 173 µs op and 126–208 µs late after 1–2.7 ms
    /// ones (benches/RESULTS.md), the size of the gap between a timed GEMM and PyTorch's on an
    /// H100. Only waits that release no memory use it; those that guard memory (a segment's
    /// release, an in-flight copy) wait to the end.
    pub(crate) fn wait_interruptibly(&self, op: impl Into<&'static str>) -> Result<()> {
        let op = op.into();
        self.wait_streams_interruptibly(op, true)
    }

    /// `wait_interruptibly` for the calling thread's current stream of the device alone, as
    /// PyTorch's blocking copy waits (a DataLoader's copy on a side stream does not hold up
    /// `loss.item()`); for every stream while kernels' index checks are still to be read, since
    /// a check's slot is read from host memory, safe only once its kernel's stream is waited for.
    pub(crate) fn wait_current_interruptibly(&self, op: impl Into<&'static str>) -> Result<()> {
        let op = op.into();
        self.wait_streams_interruptibly(op, false)
    }

    fn wait_streams_interruptibly(
        &self,
        op: impl Into<&'static str>,
        every_stream: bool,
    ) -> Result<()> {
        let op = op.into();
        let checks_before = lock(&self.checks).queued();
        let streams: Vec<StreamId> = if every_stream || checks_before > 0 {
            (0..self.driver.stream_count() as StreamId).collect()
        } else {
            vec![self.driver.current()]
        };
        let done = self.events_after_queued_work(op, &streams)?;
        if let Waited::Interrupted = wait_for(&done, None) {
            return Err(Error::Interrupted);
        }
        // Reports a failure of the queued work, if any, then of the checks its kernels made.
        self.keep_reached(op, done)?;
        // Checks another thread queued meanwhile belong to kernels queued after the event: the
        // slots are read from host memory, without the stream's order, so wait for those too.
        if lock(&self.checks).queued() != checks_before {
            self.synchronize()?;
        }
        self.read_checks(Reported::AtNextWait)
    }

    /// An event recorded after the work queued so far on each of `streams`: events the last
    /// waits kept, or new ones (two threads waiting at once each get their own).
    fn events_after_queued_work(
        &self,
        op: impl Into<&'static str>,
        streams: &[StreamId],
    ) -> Result<Vec<Event>> {
        let op = op.into();
        let mut done = Vec::with_capacity(streams.len());
        for &stream in streams {
            let kept = lock(&self.idle_events).pop();
            let event = match kept {
                Some(e) => e,
                None => self.driver.new_event().map_err(|e| self.err(op, e))?,
            };
            self.driver
                .record_on(&event, stream)
                .map_err(|e| self.err(op, e))?;
            done.push(event);
        }
        Ok(done)
    }

    /// Reports a failure of the work before `done` (all reached), and keeps them for the next
    /// waits.
    fn keep_reached(&self, op: impl Into<&'static str>, done: Vec<Event>) -> Result<()> {
        let op = op.into();
        for event in &done {
            event.synchronize().map_err(|e| self.err(op, e))?;
        }
        let mut kept = lock(&self.idle_events);
        let room = (STREAMS_PER_POOL as usize + 1).saturating_sub(kept.len());
        kept.extend(done.into_iter().take(room));
        Ok(())
    }

    /// The end of a REPL cell: if kernels' index checks are still to be read, waits up to
    /// `limit` for the work queued so far and reads them (`Reported::AtCellEnd`), so that a
    /// failure is the error of the cell that queued the op. At `limit` the device may still run
    /// that work: the session asks again. If the user interrupts the wait, its checks are marked
    /// as outliving their cell, to be read at the next wait. Nothing to read: no wait, one lock.
    fn read_checks_at_cell_end(&self, limit: Duration) -> Result<CellEndWait> {
        const OP: &str = "synchronize";
        let queued = lock(&self.checks).queued();
        if queued == 0 {
            return Ok(CellEndWait::Read);
        }
        let every: Vec<StreamId> = (0..self.driver.stream_count() as StreamId).collect();
        let done = self.events_after_queued_work(OP, &every)?;
        match wait_for(&done, Some(Instant::now() + limit)) {
            Waited::Reached => {}
            Waited::TimedOut => return Ok(CellEndWait::StillRunning),
            Waited::Interrupted => {
                lock(&self.checks).outlived_cell();
                return Ok(CellEndWait::Stopped);
            }
        }
        // Checks another thread queued meanwhile may belong to kernels after the event.
        if lock(&self.checks).queued() != queued {
            return Ok(CellEndWait::StillRunning);
        }
        self.keep_reached(OP, done)?;
        self.read_checks(Reported::AtCellEnd)
            .map(|()| CellEndWait::Read)
    }

    /// The address of a zeroed slot for a kernel that checks `op`'s indices along `dim` (of
    /// `size`) as it runs; a failure is reported at the host's next wait for the device.
    pub(crate) fn index_check(
        &self,
        op: impl Into<&'static str>,
        dim: usize,
        size: usize,
    ) -> Result<u64> {
        let op = op.into();
        if lock(&self.checks).is_full() {
            self.wait_interruptibly(op)?; // reads the checks, freeing their slots
        }
        let mut checks = lock(&self.checks);
        let base = checks.slots(&self.driver).map_err(|e| {
            let why = format!("no page-locked host memory for its index checks: {e}");
            driver_error(op, self.index, why)
        })?;
        Ok(checks.queue(base, op, dim, size))
    }

    /// Reads the index checks queued before a wait for the device that has just ended: the first
    /// that failed is the error (`checks.rs`), said to be read where `reported` says, or after
    /// its cell if that cell ended before the kernel ran.
    fn read_checks(&self, reported: Reported) -> Result<()> {
        match lock(&self.checks).read() {
            None => Ok(()),
            Some((cause, outlived_cell)) => Err(Error::FoundOnDevice {
                device: self.device(),
                cause: Box::new(cause),
                reported: if outlived_cell {
                    Reported::AfterItsCell
                } else {
                    reported
                },
            }),
        }
    }

    /// Waits for the work queued on `stream` so far, stopping at the user's interrupt as
    /// `wait_interruptibly` does (`cuda::Stream::synchronize`).
    pub(crate) fn wait_stream_interruptibly(
        &self,
        op: impl Into<&'static str>,
        stream: StreamId,
    ) -> Result<()> {
        let op = op.into();
        let done = self.driver.new_event().map_err(|e| self.err(op, e))?;
        self.driver
            .record_on(&done, stream)
            .map_err(|e| self.err(op, e))?;
        self.wait_event_interruptibly(op, &done)
    }

    /// Waits for `event` (of this device) to be reached, stopping at the user's interrupt.
    pub(crate) fn wait_event_interruptibly(
        &self,
        op: impl Into<&'static str>,
        event: &Event,
    ) -> Result<()> {
        let op = op.into();
        if let Waited::Interrupted = wait_for(std::slice::from_ref(event), None) {
            return Err(Error::Interrupted);
        }
        event.synchronize().map_err(|e| self.err(op, e))
    }

    /// An event at the current end of each of `streams`: a block those streams used, freed now,
    /// is reused once all are reached (PyTorch's `insert_events`). Where an event cannot be made
    /// the device is waited for instead, and nothing is left pending.
    pub(crate) fn work_queued_on(&self, streams: &[StreamId]) -> Vec<Box<dyn PendingUse>> {
        let events: DriverResultOf<Vec<_>> = streams
            .iter()
            .map(|&s| {
                let e = self.driver.new_event()?;
                self.driver.record_on(&e, s)?;
                Ok(Box::new(QueuedWork(e)) as Box<dyn PendingUse>)
            })
            .collect();
        events.unwrap_or_else(|_| {
            let _ = self.driver.synchronize();
            Vec::new()
        })
    }

    /// Waits for all work queued on the device.
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.driver
            .synchronize()
            .map_err(|e| self.err("synchronize", e))
    }
}

/// The work a stream had queued when a block it used was freed (`Gpu::work_queued_on`).
struct QueuedWork(Event);

impl PendingUse for QueuedWork {
    fn is_done(&self) -> bool {
        self.0.is_complete()
    }

    fn wait(&self) {
        // A failure of that work is reported by the next wait of the device's own.
        let _ = self.0.synchronize();
    }
}

/// How a wait for an event ended (`wait_for`).
enum Waited {
    Reached,
    /// The user interrupted the cell (`device::interrupt`).
    Interrupted,
    /// The deadline passed first.
    TimedOut,
}

/// Waits for `done` until `deadline` (`None`: no limit) or the user's interrupt, looking for an
/// interrupt between slices. For its first 20 ms it wakes the moment the event is reached (a
/// busy loop on a real GPU, as `torch.cuda.synchronize`'s default wait is); after that it looks
/// every 200 µs, so that a long queue does not hold a core for its whole length.
fn wait_for(done: &[Event], deadline: Option<Instant>) -> Waited {
    const BUSY_FOR: Duration = Duration::from_millis(20);
    const SLICE: Duration = Duration::from_millis(1);
    const NAP: Duration = Duration::from_micros(200);
    let start = Instant::now();
    let mut left = done.iter().peekable();
    loop {
        let Some(next) = left.peek() else {
            return Waited::Reached;
        };
        let reached = if start.elapsed() < BUSY_FOR {
            next.wait_up_to(SLICE)
        } else {
            std::thread::sleep(NAP);
            next.is_complete()
        };
        if reached {
            left.next();
            continue;
        }
        if crate::device::interrupt::is_requested() {
            return Waited::Interrupted;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Waited::TimedOut;
        }
    }
}

/// How one GPU's wait at the end of a REPL cell ended (`Gpu::read_checks_at_cell_end`).
enum CellEndWait {
    /// Its checks were read (or there were none).
    Read,
    /// It still ran the cell's checked work when the wait's limit passed.
    StillRunning,
    /// The user interrupted the wait; its checks are read at the next wait.
    Stopped,
}

/// What the end of a REPL cell found on the GPUs opened so far (`read_checks_at_cell_end`).
#[derive(Debug, Default)]
pub(crate) struct CellEnd {
    /// A check that failed (`Error::FoundOnDevice`), or work that failed, on each device.
    pub(crate) errors: Vec<Error>,
    /// The devices that still ran the cell's checked work when the wait's limit passed: the
    /// session asks again.
    pub(crate) still_running: Vec<Device>,
    /// The devices whose wait the user interrupted: their checks are read at the next wait.
    pub(crate) stopped: Vec<Device>,
}

/// Reads the index checks of every opened GPU at the end of a REPL cell, waiting at most `limit`
/// in all for the devices that have checks to read (`Gpu::read_checks_at_cell_end`), and less if
/// the user interrupts. A program never calls it: there a check is read at the next wait, as in
/// PyTorch.
pub(crate) fn read_checks_at_cell_end(limit: Duration) -> CellEnd {
    let mut open: Vec<Arc<Gpu>> = GPUS.values();
    open.sort_by_key(|g| g.index);
    let deadline = Instant::now() + limit;
    let mut found = CellEnd::default();
    for g in open {
        match g.read_checks_at_cell_end(deadline.saturating_duration_since(Instant::now())) {
            Ok(CellEndWait::Read) => {}
            Ok(CellEndWait::StillRunning) => found.still_running.push(g.device()),
            Ok(CellEndWait::Stopped) => found.stopped.push(g.device()),
            Err(e) => found.errors.push(e),
        }
    }
    found
}

/// Device memory for the caching allocator, straight from the driver (`cuMemAlloc` on a real
/// GPU) for each new segment, returned when `empty_cache` releases one (after the device's
/// queued work is done, since a kernel may still read a block freed on the host).
pub(crate) struct CudaMemory {
    gpu: Arc<Gpu>,
    /// The last failure that was not out-of-memory (a fault left by an earlier kernel, say), so
    /// that it is reported as what it is rather than as a full device.
    failure: Option<DriverError>,
}

impl CudaMemory {
    pub(crate) fn new(index: usize) -> Result<CudaMemory> {
        Ok(CudaMemory {
            gpu: gpu(index)?,
            failure: None,
        })
    }
}

impl RawAllocator for CudaMemory {
    fn alloc(&mut self, size: usize) -> Option<usize> {
        // Out of memory makes the caching allocator release its cache and retry once, then
        // report the driver's free/total; any other failure (`failure`) is reported at once as
        // the driver's error.
        match self.gpu.driver.malloc(size) {
            Ok(p) => Some(p as usize),
            Err(DriverError::OutOfMemory) => None,
            Err(e) => {
                self.failure = Some(e);
                None
            }
        }
    }

    fn take_failure(&mut self) -> Option<String> {
        self.failure.take().map(|e| e.to_string())
    }

    fn lent(&mut self, addr: usize, requested: usize, stream: StreamId) {
        self.gpu.driver.mark_block(addr, requested, true, stream);
    }

    fn returned(&mut self, addr: usize, size: usize, stream: StreamId) {
        self.gpu.driver.mark_block(addr, size, false, stream);
    }

    fn free(&mut self, addr: usize, size: usize) {
        // SAFETY: the caching allocator frees only whole segments it got from `alloc`.
        unsafe { self.gpu.driver.free(addr as u64, size) };
    }

    fn mem_info(&self) -> (usize, usize) {
        self.gpu.driver.mem_info()
    }
}
