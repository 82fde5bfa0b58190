//! An emulated device's stream: one worker thread that runs queued work in order, as a CUDA
//! stream does, while the host goes on; a device's streams run beside each other. Events are
//! points in that order with a host timestamp. A failure of queued work (a kernel's) is sticky
//! for the whole device, as a CUDA context's is: every later call on any of its streams reports
//! it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::backend::gpu::call::{DriverError, DriverResult};

type Job = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// Times the host has waited for an emulated stream's work in this process (a stream or an
/// event synchronized, a copy to pageable memory, a segment released).
static HOST_WAITS: AtomicU64 = AtomicU64::new(0);

/// How many times the host has waited for an emulated stream's work in this process.
pub(crate) fn host_waits() -> u64 {
    HOST_WAITS.load(Ordering::Relaxed)
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Jobs queued so far, and jobs finished: job `t` (1-based) is done once `done >= t`.
    queued: u64,
    done: u64,
    /// The first failure; later jobs are skipped, as a faulted context runs nothing more.
    failure: Option<String>,
}

pub(crate) struct Stream {
    queue: Mutex<Queue>,
    /// Signalled when a job is queued (to the worker) and when one finishes (to waiters).
    changed: Condvar,
    /// The first failure on any stream of the device, shared by its streams.
    device_failure: DeviceFailure,
}

/// The sticky failure of one emulated device, shared by its streams.
pub(crate) type DeviceFailure = Arc<Mutex<Option<String>>>;

fn failed(f: &DeviceFailure) -> Option<String> {
    f.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn lock(m: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Stream {
    /// A stream with its worker thread (named after the device and stream), failing with the
    /// device's other streams. The worker holds only a weak reference, and ends when the stream
    /// is dropped.
    pub(crate) fn start(
        name: String,
        device_failure: DeviceFailure,
    ) -> std::io::Result<Arc<Stream>> {
        let stream = Arc::new(Stream {
            queue: Mutex::default(),
            changed: Condvar::new(),
            device_failure,
        });
        let weak = Arc::downgrade(&stream);
        std::thread::Builder::new().name(name).spawn(move || {
            while let Some(s) = weak.upgrade() {
                let job = {
                    let mut q = lock(&s.queue);
                    loop {
                        if let Some(j) = q.jobs.pop_front() {
                            break Some(j);
                        }
                        // Wake now and then to notice a dropped stream.
                        let (g, _) = s
                            .changed
                            .wait_timeout(q, std::time::Duration::from_millis(200))
                            .unwrap_or_else(|e| e.into_inner());
                        q = g;
                        if q.jobs.is_empty() && Arc::strong_count(&s) == 1 {
                            break None;
                        }
                    }
                };
                let Some(job) = job else { break };
                let skip = lock(&s.queue).failure.is_some() || failed(&s.device_failure).is_some();
                let result = if skip { Ok(()) } else { job() };
                let mut q = lock(&s.queue);
                if let Err(e) = result {
                    let mut device = s.device_failure.lock().unwrap_or_else(|e| e.into_inner());
                    device.get_or_insert_with(|| e.clone());
                    q.failure.get_or_insert(e);
                }
                q.done += 1;
                drop(q);
                s.changed.notify_all();
            }
        })?;
        Ok(stream)
    }

    /// The sticky failure, if queued work has failed.
    pub(crate) fn failure(&self) -> Result<(), String> {
        let own = lock(&self.queue).failure.clone();
        match own.or_else(|| failed(&self.device_failure)) {
            Some(e) => Err(format!("an earlier operation on the device failed: {e}")),
            None => Ok(()),
        }
    }

    /// Queues `job`; returns its ticket for `wait_for`.
    pub(crate) fn enqueue(&self, job: Job) -> Result<u64, String> {
        self.failure()?;
        let mut q = lock(&self.queue);
        q.jobs.push_back(job);
        q.queued += 1;
        let ticket = q.queued;
        drop(q);
        self.changed.notify_all();
        Ok(ticket)
    }

    /// Whether job `ticket` has finished.
    pub(crate) fn reached(&self, ticket: u64) -> bool {
        lock(&self.queue).done >= ticket
    }

    /// Whether job `ticket` has finished, waiting up to `limit` for it (not counted in
    /// `host_waits`: the caller's own wait counts once, when it ends).
    pub(crate) fn reached_within(&self, ticket: u64, limit: Duration) -> bool {
        let q = lock(&self.queue);
        let (q, _) = self
            .changed
            .wait_timeout_while(q, limit, |q| q.done < ticket && q.failure.is_none())
            .unwrap_or_else(|e| e.into_inner());
        q.done >= ticket || q.failure.is_some()
    }

    /// Waits on the host until job `ticket` has finished (counted in `host_waits`).
    pub(crate) fn wait_for(&self, ticket: u64) -> Result<(), String> {
        HOST_WAITS.fetch_add(1, Ordering::Relaxed);
        self.reach(ticket)
    }

    /// Waits until job `ticket` has finished (on another stream's worker: not a host wait).
    fn reach(&self, ticket: u64) -> Result<(), String> {
        let mut q = lock(&self.queue);
        while q.done < ticket {
            q = self.changed.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        drop(q);
        self.failure()
    }

    /// Waits until everything queued so far has finished.
    pub(crate) fn synchronize(&self) -> Result<(), String> {
        let ticket = lock(&self.queue).queued;
        self.wait_for(ticket)
    }

    /// Whether everything queued so far has finished (never waits).
    pub(crate) fn is_idle(&self) -> bool {
        let q = lock(&self.queue);
        q.done >= q.queued
    }

    /// Queues a job that holds the stream until the returned `Hold` is dropped: the work queued
    /// after it waits, as behind a long kernel, while the device's other streams go on.
    pub(crate) fn hold(&self) -> Result<Hold, String> {
        let gate: Gate = Arc::new((Mutex::new(false), Condvar::new()));
        let held = gate.clone();
        self.enqueue(Box::new(move || {
            let (open, opened) = &*held;
            let mut o = open.lock().unwrap_or_else(|e| e.into_inner());
            while !*o {
                o = opened.wait(o).unwrap_or_else(|e| e.into_inner());
            }
            Ok(())
        }))?;
        Ok(Hold { gate })
    }
}

type Gate = Arc<(Mutex<bool>, Condvar)>;

/// A stream held by `Stream::hold`; dropping it lets the stream go on.
#[derive(Debug)]
pub struct Hold {
    gate: Gate,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let (open, opened) = &*self.gate;
        *open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        opened.notify_all();
    }
}

/// A point on an emulated stream, timestamped by the host when the stream reaches it.
pub(crate) struct Event {
    state: Mutex<Option<Recorded>>,
}

/// Emulated events made and not yet destroyed in this process.
static LIVE_EVENTS: AtomicU64 = AtomicU64::new(0);

/// How many emulated events exist now (made by `new_event`, not yet dropped).
pub(crate) fn live_events() -> u64 {
    LIVE_EVENTS.load(Ordering::Relaxed)
}

impl Default for Event {
    fn default() -> Event {
        LIVE_EVENTS.fetch_add(1, Ordering::Relaxed);
        Event {
            state: Mutex::default(),
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        LIVE_EVENTS.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Clone)]
struct Recorded {
    stream: Arc<Stream>,
    ticket: u64,
    at: Arc<Mutex<Option<Instant>>>,
}

impl Event {
    fn recorded(&self) -> Option<Recorded> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records the event at the end of `stream`'s queue.
    pub(crate) fn record_on(&self, stream: &Arc<Stream>) -> Result<(), String> {
        let at = Arc::new(Mutex::new(None));
        let stamp = at.clone();
        let ticket = stream.enqueue(Box::new(move || {
            *stamp.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            Ok(())
        }))?;
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = Some(Recorded {
            stream: stream.clone(),
            ticket,
            at,
        });
        Ok(())
    }

    /// When the stream reached the event; an event never recorded, or not reached yet, has no
    /// time.
    fn time(&self) -> DriverResult<Instant> {
        let r = self.recorded().ok_or(DriverError::EventNotReached)?;
        let at = *r.at.lock().unwrap_or_else(|e| e.into_inner());
        at.ok_or(DriverError::EventNotReached)
    }
}

impl Event {
    pub(crate) fn synchronize(&self) -> DriverResult<()> {
        // CUDA: an event never recorded counts as reached.
        match self.recorded() {
            Some(r) => r.stream.wait_for(r.ticket).map_err(DriverError::Emulator),
            None => Ok(()),
        }
    }

    pub(crate) fn is_complete(&self) -> bool {
        self.recorded().is_none_or(|r| r.stream.reached(r.ticket))
    }

    pub(crate) fn wait_up_to(&self, limit: Duration) -> bool {
        self.recorded()
            .is_none_or(|r| r.stream.reached_within(r.ticket, limit))
    }

    pub(crate) fn elapsed_ms_since(&self, start: &Event) -> DriverResult<f32> {
        let (a, b) = (start.time()?, self.time()?);
        Ok(b.saturating_duration_since(a).as_secs_f32() * 1e3)
    }
}

/// Makes `stream` wait for `event` (of any emulated stream) before its later work.
pub(crate) fn wait_event(stream: &Stream, event: &Event) -> Result<(), String> {
    let Some(r) = event.recorded() else {
        return Ok(());
    };
    stream.enqueue(Box::new(move || r.stream.reach(r.ticket)))?;
    Ok(())
}
