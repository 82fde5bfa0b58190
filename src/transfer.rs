//! Moving tensors between devices: the one function that copies across devices, measures the
//! copy, and records it on the new tensor and in the session's transfer log.

use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use crate::inflight::pending;
use crate::storage::Storage;
use crate::{DType, Device, Error, Result, Tensor};

/// Host memory a transfer read from or wrote to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostMemoryKind {
    /// Ordinary (pageable) memory: the driver stages it through a pinned buffer.
    Pageable,
    /// Page-locked memory (`pin_memory()`): the copy engine reads it directly.
    Pinned,
}

/// How a transfer's duration was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// CUDA events recorded around the copy on its stream.
    CudaEvents,
    /// A host clock around the whole copy.
    Host,
    /// A host clock around a host-memory copy standing in for a simulated GPU's transfer: a real
    /// PCIe copy would take a different time.
    SimulatedHostCopy,
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
        let mem = match self.memory {
            HostMemoryKind::Pageable => "pageable",
            HostMemoryKind::Pinned => "pinned",
        };
        let clock = match self.clock {
            Clock::SimulatedHostCopy => ", simulated: host copy time".to_string(),
            // Waiting noticeably longer than the copy ran: pageable staging or launch latency.
            Clock::CudaEvents
                if self.mode == CopyMode::Blocking && self.wall > self.duration.mul_f64(1.2) =>
            {
                format!(", waited {}", crate::display::human_duration(self.wall))
            }
            _ => String::new(),
        };
        let clock = match self.mode {
            CopyMode::Blocking => clock,
            CopyMode::NonBlocking => format!(
                "{clock}, non-blocking: .to() returned after {}",
                crate::display::human_duration(self.wall)
            ),
            CopyMode::NonBlockingFromPageable => format!(
                "{clock}, non-blocking had no effect from pageable memory: pin_memory() first"
            ),
        };
        write!(
            f,
            "{}, {} ({}, {mem}{clock})",
            self.route(),
            crate::display::human_duration(self.duration),
            crate::display::human_rate(self.bandwidth())
        )?;
        if let Some(setup) = self.context_setup {
            write!(
                f,
                "; creating the GPU's CUDA context took {} more, once per process, not in this time",
                crate::display::human_duration(setup)
            )?;
        }
        Ok(())
    }
}

const LOG_CAPACITY: usize = 100_000;

fn log_store() -> &'static Mutex<(u64, Vec<Transfer>)> {
    static LOG: OnceLock<Mutex<(u64, Vec<Transfer>)>> = OnceLock::new();
    LOG.get_or_init(Default::default)
}

pub(crate) fn record(mut t: Transfer) -> Transfer {
    let mut log = log_store().lock().unwrap_or_else(|e| e.into_inner());
    log.0 += 1;
    t.seq = log.0;
    if log.1.len() == LOG_CAPACITY {
        log.1.remove(0);
    }
    log.1.push(t.clone());
    t
}

/// Every transfer of this process so far (the most recent 100,000), oldest first.
pub fn log() -> Vec<Transfer> {
    log_store()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .1
        .clone()
}

/// Transfers with `seq > after`: what a cell did, given the last `seq` seen before it.
pub fn log_since(after: u64) -> Vec<Transfer> {
    log_store()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .1
        .iter()
        .filter(|t| t.seq > after)
        .cloned()
        .collect()
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

impl Tensor {
    /// A copy of this tensor on `device`; this tensor stays where it is. Moving to the device it
    /// is already on returns a handle to the same storage and records nothing, as in PyTorch.
    #[must_use = "`.to()` returns a new tensor and leaves the original where it was: write `let y = x.to(&device)?;`"]
    pub fn to(&self, device: &Device) -> Result<Tensor> {
        self.transfer_to(device, false, false)
    }

    /// `.to(device, non_blocking=True)`: queues the copy and returns at once, so the host can
    /// go on while the copy engine works. The copy overlaps only from pinned memory
    /// (`pin_memory()`); from pageable memory it finishes before this returns, as in PyTorch.
    /// To a CPU the copy lands in pinned memory. `cuda::synchronize(i)` is the explicit point
    /// that waits for the copies of `cuda:i` and times them; `last_transfer()` waits for this
    /// one. Reading the values waits too, so nothing is read half-copied.
    #[must_use = "`.to_non_blocking()` returns a new tensor and leaves the original where it was"]
    pub fn to_non_blocking(&self, device: &Device) -> Result<Tensor> {
        self.transfer_to(device, device.is_cpu(), true)
    }

    /// A copy of this GPU tensor in page-locked CPU memory: the GPU's copy engine writes it
    /// directly, about twice as fast as into pageable memory (PyTorch:
    /// `torch.empty(..., pin_memory=True).copy_(x)`). On the CPU already: `pin_memory()`.
    #[must_use = "`.cpu_pinned()` returns a new tensor and leaves the original where it was"]
    pub fn cpu_pinned(&self) -> Result<Tensor> {
        if self.is_cpu() {
            return self.pin_memory();
        }
        if !crate::cuda::is_real(self.device()) {
            return self.cpu()?.pin_memory();
        }
        self.transfer_to(&Device::Cpu, true, false)
    }

    fn transfer_to(&self, device: &Device, pinned_dst: bool, non_blocking: bool) -> Result<Tensor> {
        if *device == self.device() {
            return Ok(self.clone());
        }
        device.check_available()?;
        let src = crate::autograd::no_grad(|| self.contiguous())?;
        let from = self.device();
        let memory = if src.is_pinned() || pinned_dst {
            HostMemoryKind::Pinned
        } else {
            HostMemoryKind::Pageable
        };
        // Creating a GPU's context happens here, outside the timed copy, and is reported apart.
        for d in [from, *device] {
            if let Device::Cuda(i) = d
                && crate::cuda::is_real(d)
            {
                crate::cuda::runtime::gpu(i)?;
            }
        }
        let context_setup = crate::cuda::runtime::take_unreported_setup(&[from, *device]);
        let simulated = device.is_simulated() || from.is_simulated();
        let on_real_gpu = crate::cuda::is_real(from) || crate::cuda::is_real(*device);
        let mut t = Transfer {
            seq: 0,
            from,
            to: *device,
            bytes: src.nbytes(),
            duration: Duration::ZERO,
            wall: Duration::ZERO,
            context_setup,
            memory,
            clock: if on_real_gpu {
                Clock::CudaEvents
            } else if simulated {
                Clock::SimulatedHostCopy
            } else {
                Clock::Host
            },
            mode: match (
                non_blocking,
                from.is_cpu() && memory == HostMemoryKind::Pageable,
            ) {
                (false, _) => CopyMode::Blocking,
                (true, true) => CopyMode::NonBlockingFromPageable,
                (true, false) => CopyMode::NonBlocking,
            },
            dtype: self.dtype(),
            shape: self.shape().to_vec(),
        };
        crate::inflight::poll();
        let out = if t.mode == CopyMode::NonBlocking {
            let start = Instant::now();
            let (storage, completion) = src.storage().transfer_non_blocking(*device, pinned_dst)?;
            t.wall = start.elapsed();
            // The copy reads a temporary when the source was strided: keep it until done.
            let keep_alive = (!src.shares_storage_with(self)).then(|| src.0.storage.clone());
            let f = crate::inflight::InFlight::track(t, completion, keep_alive);
            src.storage().mark_in_flight(&f);
            storage.mark_in_flight(&f);
            Tensor::from_storage(storage, self.shape().to_vec()).in_flight(f)
        } else {
            self.blocking_copy(&src, t, pinned_dst)?
        };
        // Differentiable: the gradient flows back to the source device.
        Ok(crate::autograd::record(
            out,
            "to",
            &[self],
            crate::autograd::grads::identity(),
        ))
    }

    /// Copies the contiguous `src` (this tensor's values) and records `t`, timed.
    fn blocking_copy(&self, src: &Tensor, mut t: Transfer, pinned_dst: bool) -> Result<Tensor> {
        let start = Instant::now();
        let (storage, gpu_time) = src.storage().transfer(t.to, pinned_dst)?;
        let wall = start.elapsed();
        t.duration = gpu_time.map_or(wall, |g| g.events);
        t.wall = gpu_time.map_or(wall, |g| g.wall);
        Ok(Tensor::from_storage(storage, self.shape().to_vec()).with_transfer(record(t)))
    }

    /// `to(&Device::Cuda(0))`.
    #[must_use = "`.cuda()` returns a new tensor on the GPU and leaves the original on its device: write `let y = x.cuda()?;`"]
    pub fn cuda(&self) -> Result<Tensor> {
        self.to(&Device::Cuda(0))
    }

    /// `to(&Device::Cuda(index))`.
    #[must_use = "`.cuda_at()` returns a new tensor and leaves the original where it was"]
    pub fn cuda_at(&self, index: usize) -> Result<Tensor> {
        self.to(&Device::Cuda(index))
    }

    /// `to(&Device::Cpu)`.
    #[must_use = "`.cpu()` returns a new tensor on the CPU and leaves the original where it was: write `let y = x.cpu()?;`"]
    pub fn cpu(&self) -> Result<Tensor> {
        self.to(&Device::Cpu)
    }

    /// A copy of this CPU tensor in page-locked memory, so transfers to a GPU can use DMA
    /// directly. Needs a CUDA device (real or simulated), as in PyTorch.
    #[must_use = "`.pin_memory()` returns a pinned copy; the original stays pageable"]
    pub fn pin_memory(&self) -> Result<Tensor> {
        if !self.is_cpu() {
            return Err(Error::invalid(
                "pin_memory",
                format!(
                    "only CPU tensors can be pinned, this one is on {}",
                    self.device()
                ),
            ));
        }
        if !crate::cuda::is_available() {
            return Err(Error::DeviceUnavailable {
                device: Device::Cuda(0),
                reason: "pinned memory is page-locked for a GPU's copy engine, and there is no CUDA device".into(),
            });
        }
        if self.is_pinned() {
            return Ok(self.clone());
        }
        let s = if crate::cuda::is_real(Device::Cuda(0)) {
            // Page-locked by the driver, so the copy engine reads it directly.
            let mut s = Storage::alloc_pinned(self.dtype(), self.numel())?;
            s.write_view(
                &crate::layout::Layout::contiguous(self.shape().to_vec()),
                self.storage(),
                self.layout(),
            )?;
            s
        } else {
            // Simulated GPUs: ordinary host memory, marked so transfers from it say "pinned".
            let mut s: Storage = self.storage().copy_as(self.layout(), self.dtype())?;
            s.pinned = true;
            s
        };
        Ok(Tensor::from_storage(s, self.shape().to_vec()))
    }
}
