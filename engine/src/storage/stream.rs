//! Streams and events, as `torch.cuda` has them (`cuda::Stream`, `cuda::Event`): a stream is a
//! queue of a device's work that runs beside the device's other streams; an event is a point in
//! one that the host or another stream can wait for, and that times the work between two.
//!
//! What backs them depends on the device, and this is the one place that matches on it: on a
//! GPU, real or emulated, the driver's streams and events; on the CPU and on simulated devices,
//! whose kernels have finished when the call that queued them returns, a stream is a number
//! (which pool of the caching allocator a block comes from) and an event a host timestamp, so
//! waits return at once, as PyTorch's CPU streams do.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::backend::gpu::driver::Event as DriverEvent;
use crate::backend::gpu::runtime::{Gpu, gpu};
use crate::device::current_stream::{self, DEFAULT_STREAM, StreamId, pool_slot};
use crate::device::error::{Error, Result};
use crate::device::per_device::PerDevice;
use crate::device::{Device, DeviceKind};
use crate::profile;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A stream of one device (`torch.cuda.Stream`). Cloning it names the same stream.
#[derive(Clone)]
pub struct Stream {
    device: Device,
    id: StreamId,
    /// The driver that made it, on a GPU (real or emulated); the CPU and simulated devices
    /// have none.
    gpu: Option<Arc<Gpu>>,
}

/// The driver behind `device` when it runs the CUDA backend.
fn driver_of(device: Device) -> Result<Option<Arc<Gpu>>> {
    match (device, device.kind()?) {
        (Device::Cuda(i), DeviceKind::Gpu | DeviceKind::EmulatedGpu { .. }) => Ok(Some(gpu(i)?)),
        _ => Ok(None),
    }
}

/// Side streams asked of each simulated device so far: their numbers are handed out here.
static SIMULATED_STREAMS: PerDevice<Device, Arc<AtomicU64>> = PerDevice::new();

impl Stream {
    /// A side stream of `device` (`torch.cuda.Stream(device)`), beside its default stream: as in
    /// PyTorch, one of a pool of 32, handed out round robin, so the 33rd is the first again. On
    /// the CPU it is the CPU's one stream (`torch.cpu.Stream()`).
    pub fn new(device: &Device) -> Result<Stream> {
        let gpu = driver_of(*device)?;
        let id = match (&gpu, device) {
            (Some(g), _) => g
                .driver
                .new_stream()
                .map_err(|e| g.err("cuda::Stream::new", e))?,
            (None, Device::Cpu) => DEFAULT_STREAM,
            (None, _) => {
                let fresh = |_| Ok(Arc::new(AtomicU64::new(0)));
                let asked = SIMULATED_STREAMS.get_or_make(*device, *device, fresh, drop)?;
                pool_slot(asked.fetch_add(1, Ordering::Relaxed))
            }
        };
        Ok(Stream {
            device: *device,
            id,
            gpu,
        })
    }

    fn of(device: &Device, id: StreamId) -> Result<Stream> {
        Ok(Stream {
            device: *device,
            id,
            gpu: driver_of(*device)?,
        })
    }

    /// The device whose work it queues.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Its number on its device: 0 for the default stream, then in the order they were made.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Waits on the host until the work queued on it so far is done
    /// (`torch.cuda.Stream.synchronize`); an interrupt stops the wait, not the work.
    pub fn synchronize(&self) -> Result<()> {
        match &self.gpu {
            Some(g) => g.wait_stream_interruptibly("Stream::synchronize", self.id),
            None => Ok(()),
        }
    }

    /// Whether the work queued on it so far is done (`torch.cuda.Stream.query`); never waits.
    pub fn query(&self) -> Result<bool> {
        match &self.gpu {
            Some(g) => g
                .driver
                .stream_is_idle(self.id)
                .map_err(|e| g.err("Stream::query", e)),
            None => Ok(true),
        }
    }

    /// Makes the work queued on this stream from now on wait until `other` has done the work
    /// queued on it so far (`torch.cuda.Stream.wait_stream`); the host does not wait.
    pub fn wait_stream(&self, other: &Stream) -> Result<()> {
        let event = Event::new();
        event.record(other)?;
        event.wait(self)
    }

    /// Makes the work queued on this stream from now on wait for `event`
    /// (`torch.cuda.Stream.wait_event`).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        event.wait(self)
    }

    /// A new event recorded on this stream now (`torch.cuda.Stream.record_event`).
    pub fn record_event(&self) -> Result<Event> {
        let event = Event::new();
        event.record(self)?;
        Ok(event)
    }

    /// Holds this stream, as a long kernel would, until the returned value is dropped: what is
    /// queued on it after waits, while the device's other streams go on. Emulated devices only:
    /// with it a test or a lesson makes a race between two streams certain instead of likely.
    /// Drop it before anything waits for the whole device (`cuda::synchronize`, `empty_cache`,
    /// an allocation that must release the cache): those wait for the held stream too, and only
    /// `synchronize` can be interrupted.
    pub fn hold(&self) -> Result<crate::backend::gpu::emulated::Hold> {
        match &self.gpu {
            Some(g) => g.driver.hold(self.id).map_err(|e| g.err("Stream::hold", e)),
            None => Err(Error::InvalidArgument {
                op: "Stream::hold",
                msg: format!(
                    "{} runs its work as it is queued, so there is nothing to hold; hold a stream of an emulated GPU (cuda::emulate(1))",
                    self.device.label()
                ),
            }),
        }
    }
}

impl PartialEq for Stream {
    fn eq(&self, other: &Stream) -> bool {
        self.device == other.device && self.id == other.id
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.device, self.id) {
            (Device::Cpu, _) => write!(f, "Stream(cpu)"),
            (d, DEFAULT_STREAM) => write!(f, "Stream({d}, default)"),
            (d, id) => write!(f, "Stream({d}, {id})"),
        }
    }
}

/// The stream the calling thread queues `device`'s work on (`torch.cuda.current_stream`): its
/// default stream unless `with_stream` made another current.
pub fn current_stream(device: &Device) -> Result<Stream> {
    Stream::of(device, current_stream::current(*device))
}

/// `device`'s default stream (`torch.cuda.default_stream`), where work goes unless a stream is
/// made current.
pub fn default_stream(device: &Device) -> Result<Stream> {
    Stream::of(device, DEFAULT_STREAM)
}

/// Runs `f` with `stream` current for its device on this thread (`with torch.cuda.stream(s):`):
/// the kernels and copies `f` queues on that device go on `stream`, and the tensors it makes
/// come from that stream's memory pool. The stream current before comes back after, on a
/// panic too.
pub fn with_stream<R>(stream: &Stream, f: impl FnOnce() -> R) -> R {
    let _current = current_stream::make_current(stream.device, stream.id);
    f()
}

/// A point in a stream's work (`torch.cuda.Event(enable_timing=True)`): record it on a stream,
/// then wait for it (the host, or another stream), ask whether it is reached, or time the work
/// between two. It belongs to the device it is first recorded on.
pub struct Event {
    recorded: Mutex<Option<Recorded>>,
    /// Where its stream's work stood in the profile recording when it was recorded, if one was.
    mark: Mutex<Option<profile::StreamMark>>,
}

enum Recorded {
    /// On a GPU: the driver's event.
    Gpu {
        device: Device,
        gpu: Arc<Gpu>,
        /// Shared, so that a wait for it holds no lock (`synchronize`).
        event: Arc<DriverEvent>,
    },
    /// On the CPU or a simulated device, whose work before it is done: when it was recorded.
    Host { device: Device, at: Instant },
}

impl Recorded {
    fn device(&self) -> Device {
        match self {
            Recorded::Gpu { device, .. } | Recorded::Host { device, .. } => *device,
        }
    }
}

impl Default for Event {
    fn default() -> Event {
        Event::new()
    }
}

impl Event {
    /// An event not recorded yet.
    pub fn new() -> Event {
        Event {
            recorded: Mutex::new(None),
            mark: Mutex::new(None),
        }
    }

    /// Records the event at the current end of `stream`'s work (`event.record(stream)`);
    /// recording it again moves it there. PyTorch's `event.record()` with no stream is
    /// `event.record(&cuda::current_stream(&device)?)` here.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        self.record_driver_event(stream)?;
        *lock(&self.mark) = profile::stream_mark(stream.device, stream.id);
        Ok(())
    }

    fn record_driver_event(&self, stream: &Stream) -> Result<()> {
        let mut recorded = lock(&self.recorded);
        if let Some(r) = &*recorded
            && r.device() != stream.device
        {
            return Err(Error::InvalidArgument {
                op: "Event::record",
                msg: format!(
                    "the event belongs to {} (it was first recorded there) and {stream:?} is of {}; make a new Event for {}, as PyTorch requires too",
                    r.device(),
                    stream.device,
                    stream.device
                ),
            });
        }
        let Some(g) = &stream.gpu else {
            *recorded = Some(Recorded::Host {
                device: stream.device,
                at: Instant::now(),
            });
            return Ok(());
        };
        let reuse = matches!(&*recorded, Some(Recorded::Gpu { gpu, .. }) if Arc::ptr_eq(gpu, g));
        if !reuse {
            let event = g
                .driver
                .new_event()
                .map_err(|e| g.err("Event::record", e))?;
            *recorded = Some(Recorded::Gpu {
                device: stream.device,
                gpu: g.clone(),
                event: Arc::new(event),
            });
        }
        let Some(Recorded::Gpu { event, .. }) = &*recorded else {
            unreachable!("set above")
        };
        g.driver
            .record_on(event, stream.id)
            .map_err(|e| g.err("Event::record", e))
    }

    /// Makes the work queued on `stream` from now on wait until the event is reached
    /// (`event.wait(stream)`); the host does not wait. The stream may be of another GPU.
    pub fn wait(&self, stream: &Stream) -> Result<()> {
        self.wait_driver_event(stream)?;
        if let Some(mark) = *lock(&self.mark) {
            profile::stream_waited(mark, stream.device, stream.id);
        }
        Ok(())
    }

    fn wait_driver_event(&self, stream: &Stream) -> Result<()> {
        let recorded = lock(&self.recorded);
        let Some(r) = &*recorded else {
            return Err(Error::InvalidArgument {
                op: "Event::wait",
                msg: format!(
                    "the event was never recorded, so {stream:?} would wait for nothing; record it first on the stream whose work to wait for (`event.record(&stream)?`). PyTorch skips such a wait without a word"
                ),
            });
        };
        match (r, &stream.gpu) {
            (Recorded::Gpu { event, .. }, Some(g)) => g
                .driver
                .wait_event_on(stream.id, event)
                .map_err(|e| g.err("Event::wait", e)),
            // The CPU and simulated devices have done the work before the event; a host stream
            // runs its work as it is queued, after what the host waited for.
            _ => Ok(()),
        }
    }

    /// Waits on the host until the event is reached (`event.synchronize()`); an event never
    /// recorded is reached, as in CUDA. An interrupt stops the wait, not the work.
    pub fn synchronize(&self) -> Result<()> {
        // The wait holds no lock: `query` and `record` from other threads go on meanwhile.
        let waited = match &*lock(&self.recorded) {
            Some(Recorded::Gpu { gpu, event, .. }) => Some((gpu.clone(), event.clone())),
            _ => None,
        };
        match waited {
            Some((gpu, event)) => gpu.wait_event_interruptibly("Event::synchronize", &event),
            None => Ok(()),
        }
    }

    /// Whether the event is reached (`event.query()`); never waits. An event never recorded is.
    pub fn query(&self) -> bool {
        match &*lock(&self.recorded) {
            Some(Recorded::Gpu { event, .. }) => event.is_complete(),
            _ => true,
        }
    }

    /// Milliseconds from this event to `end` (`start.elapsed_time(end)`): the time the stream's
    /// work between them took. Both must be recorded on one device and reached.
    pub fn elapsed_time(&self, end: &Event) -> Result<f32> {
        let op = "Event::elapsed_time";
        let misuse = |msg: String| Error::InvalidArgument { op, msg };
        if std::ptr::eq(self, end) {
            return Ok(0.0);
        }
        // Locked in address order, so that `a.elapsed_time(&b)` and `b.elapsed_time(&a)` on two
        // threads cannot wait for each other.
        let (start, stop) = if std::ptr::from_ref(self) < std::ptr::from_ref(end) {
            let start = lock(&self.recorded);
            (start, lock(&end.recorded))
        } else {
            let stop = lock(&end.recorded);
            (lock(&self.recorded), stop)
        };
        let (Some(a), Some(b)) = (&*start, &*stop) else {
            return Err(misuse(
                "both events must be recorded first (`start.record(&stream)?`, the work, then `end.record(&stream)?`), as in PyTorch".into(),
            ));
        };
        if a.device() != b.device() {
            return Err(misuse(format!(
                "the events are of {} and {}: time one device's work with two events recorded on it",
                a.device(),
                b.device()
            )));
        }
        match (a, b) {
            (Recorded::Host { at: a, .. }, Recorded::Host { at: b, .. }) => {
                Ok(b.saturating_duration_since(*a).as_secs_f32() * 1e3)
            }
            (Recorded::Gpu { event: a, gpu, .. }, Recorded::Gpu { event: b, .. }) => {
                if !b.is_complete() || !a.is_complete() {
                    return Err(misuse(
                        "the stream has not reached the events yet: call `end.synchronize()?` first, as PyTorch needs `torch.cuda.synchronize()`".into(),
                    ));
                }
                b.elapsed_ms_since(a).map_err(|e| gpu.err(op, e))
            }
            _ => Err(misuse(
                "one event was recorded before a change of the stand-ins and one after: record both again".into(),
            )),
        }
    }
}
