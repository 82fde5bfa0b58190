//! Copies of a whole storage to another device (blocking, or queued and waited on later), host
//! copies of GPU views for reading, and pinned copies: the backend matching that `.to()` needs.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Storage, gpu_index};
use crate::backend::cpu;
pub(crate) use crate::backend::gpu::copy::CopyTime;
use crate::backend::gpu::copy::{self, Timing};
use crate::base::op::Op;
use crate::device::error::{Error, Result};
use crate::device::layout::Layout;
use crate::device::{Device, DeviceKind};

/// What a queued copy's completion is waited on.
pub(crate) enum Completion {
    /// CUDA events around the copy on a GPU's stream.
    Events(Timing),
    /// A host thread copying between host-backed storages (simulated GPUs, pinned CPU memory);
    /// it returns how long the copy itself ran.
    Thread(JoinHandle<Duration>),
    /// A copy between host-backed storages too small for a thread, done before the call
    /// returned (`INLINE_BELOW`), and how long it ran.
    Done(Duration),
}

/// Host-backed copies smaller than this are done by the calling thread even when asked not to
/// block. Starting and joining a thread cost 47 µs a copy on the 2-core EPYC VM when idle, more
/// where the new thread waits to be scheduled: notebook 08's prefetching loader (138 copies of
/// at most 16 KiB) took 36-39 ms against 22-24 ms for blocking copies alone, and 257.7 ms
/// against 33.8 ms in the notebook tests' run. A memcpy of 1 MiB takes about as long as a
/// thread's start, so below it a thread has nothing to overlap. PyTorch's non-blocking copies
/// between host memories are synchronous too.
const INLINE_BELOW: usize = 1 << 20;

impl Completion {
    /// Between two GPUs: whether the copy goes peer to peer.
    pub(crate) fn peer(&self) -> Option<bool> {
        match self {
            Completion::Events(t) => t.peer,
            Completion::Thread(_) | Completion::Done(_) => None,
        }
    }

    /// Whether the copy has finished (never waits).
    pub(crate) fn is_done(&self) -> bool {
        match self {
            Completion::Events(t) => t.is_done(),
            Completion::Thread(h) => h.is_finished(),
            Completion::Done(_) => true,
        }
    }

    /// Waits and returns the copy's duration.
    pub(crate) fn wait(self) -> Result<Duration> {
        match self {
            Completion::Events(t) => Ok(t.wait()?.events),
            Completion::Thread(h) => h.join().map_err(|_| Error::Cuda {
                op: "non-blocking .to()",
                device: Device::Cpu,
                msg: "the host thread running the copy panicked".into(),
            }),
            Completion::Done(took) => Ok(took),
        }
    }
}

/// Makes `devices` ready for a copy (a GPU's context is created on its first use) and
/// returns the context setup time none has reported yet: a one-time cost that must never be
/// counted in a copy's time.
pub(crate) fn open_devices(devices: &[Device]) -> Result<Option<Duration>> {
    for &d in devices {
        if let Device::Cuda(i) = d
            && is_gpu(d)
        {
            crate::backend::gpu::runtime::gpu(i)?;
        }
    }
    Ok(crate::backend::gpu::runtime::take_unreported_setup(devices))
}

impl Storage {
    /// This host storage on `device`: itself when that is where it is, else an upload.
    pub(crate) fn moved_to(self, device: Device) -> Result<Storage> {
        if self.device() == device {
            Ok(self)
        } else {
            Ok(self.transfer(device, false)?.0)
        }
    }

    /// A copy of the whole storage on `device`, and how long the copy took on a GPU's clock
    /// (`None`: a host-to-host copy, a parallel memcpy, timed by the caller). `pinned_dst` asks
    /// for page-locked memory when the copy lands on the CPU.
    pub(crate) fn transfer(
        &self,
        device: Device,
        pinned_dst: bool,
    ) -> Result<(Storage, Option<CopyTime>)> {
        if self.stays_on_host(device) {
            let mut out = Storage::alloc(device, self.dtype, self.numel)?;
            // A simulated GPU's download into "page-locked" memory: marked, as `pinned_copy`
            // marks it, so it is logged and priced as the pinned copy a real GPU makes.
            out.pinned = pinned_dst && device.is_cpu();
            cpu::copy_bytes(self.bytes(), out.bytes_mut());
            return Ok((out, None));
        }
        let asked = Instant::now();
        self.wait_for_gpus_of_copy(device)?;
        let (out, timing) = self.gpu_copy(device, pinned_dst)?;
        let time = timing.wait()?;
        // The user waited for the queued work too, as for any blocking copy.
        let wall = asked.elapsed();
        Ok((out, Some(CopyTime { wall, ..time })))
    }

    /// Waits for the work queued on the current streams of the GPUs that a copy of this storage
    /// to `device` goes through, before the copy is queued: the wait a blocking copy makes, done so that an
    /// interrupt ends it (nothing is queued yet that reads or writes host memory).
    fn wait_for_gpus_of_copy(&self, device: Device) -> Result<()> {
        for d in [self.device(), device] {
            if let Device::Cuda(i) = d
                && is_gpu(d)
            {
                crate::backend::gpu::runtime::gpu(i)?.wait_current_interruptibly(".to()")?;
            }
        }
        Ok(())
    }

    /// Queues a copy of the whole storage on `device` and returns before it finishes; both
    /// storages must then be marked with the copy's tracker (`mark_in_flight`). Between
    /// host-backed storages a host thread does the copy, unless it is small (`INLINE_BELOW`).
    pub(crate) fn transfer_non_blocking(
        &self,
        device: Device,
        pinned_dst: bool,
    ) -> Result<(Storage, Completion)> {
        if !self.stays_on_host(device) {
            let (out, timing) = self.gpu_copy(device, pinned_dst)?;
            return Ok((out, Completion::Events(timing)));
        }
        let mut out = Storage::alloc(device, self.dtype, self.numel)?;
        out.pinned = pinned_dst && device.is_cpu();
        let n = self.numel * self.dtype.size_in_bytes();
        if n < INLINE_BELOW {
            let start = Instant::now();
            cpu::copy_bytes(self.bytes(), out.bytes_mut());
            return Ok((out, Completion::Done(start.elapsed())));
        }
        // Waits for earlier copies into the source. Once marked with the new copy's tracker,
        // both storages wait for it before any host access or free, so these addresses stay
        // valid and untouched until the thread is done.
        let (src, dst) = (self.host_ptr() as usize, out.host_ptr() as usize);
        let thread = std::thread::Builder::new()
            .name("placelab-copy".into())
            .spawn(move || {
                let start = Instant::now();
                // SAFETY: see above; both blocks hold `n` bytes and do not overlap.
                let (src, dst) = unsafe {
                    (
                        std::slice::from_raw_parts(src as *const u8, n),
                        std::slice::from_raw_parts_mut(dst as *mut u8, n),
                    )
                };
                // One thread, not rayon's pool: a pool thread may be the one waiting for this.
                dst.copy_from_slice(src);
                start.elapsed()
            })
            .map_err(|e| {
                Error::invalid(
                    ".to_non_blocking()",
                    format!("could not start the copy thread: {e}"),
                )
            })?;
        Ok((out, Completion::Thread(thread)))
    }

    /// Whether a copy to `device` is between host-backed storages (no GPU involved).
    fn stays_on_host(&self, device: Device) -> bool {
        self.is_host() && !is_gpu(device)
    }

    /// Queues a copy that a GPU's copy engine does, into a new storage.
    fn gpu_copy(&self, device: Device, pinned_dst: bool) -> Result<(Storage, Timing)> {
        let bytes = self.numel * self.dtype.size_in_bytes();
        match (self.is_host(), is_gpu(device)) {
            (true, true) => {
                let out = Storage::alloc(device, self.dtype, self.numel)?;
                let timing =
                    copy::host_to_device(gpu_index(device), self.bytes(), out.device_ptr())?;
                Ok((out, timing))
            }
            (false, false) => {
                let mut out = if pinned_dst {
                    Storage::alloc_pinned(self.dtype, self.numel, self.device().index())?
                } else {
                    Storage::alloc(Device::Cpu, self.dtype, self.numel)?
                };
                let from = gpu_index(self.device());
                let timing = copy::device_to_host(from, self.device_ptr(), out.bytes_mut())?;
                Ok((out, timing))
            }
            (false, true) => {
                let out = Storage::alloc(device, self.dtype, self.numel)?;
                let from = (gpu_index(self.device()), self.device_ptr());
                let to = (gpu_index(device), out.device_ptr());
                Ok((out, copy::device_to_device(from, to, bytes)?))
            }
            (true, false) => unreachable!("a host-to-host copy needs no GPU"),
        }
    }

    /// A host copy of the view `l` of a GPU storage, contiguous, for reading values (the user's
    /// reads, `item` and `to_vec`, log it as a transfer; the engine's own do not). A profile
    /// records it as the op `to_vec`, whose host time holds the wait for the GPU's queued work,
    /// as PyTorch's profiler shows `aten::item`'s. Returns it with the copy's own time, on the
    /// host's clock, after that wait.
    pub(crate) fn read_back(&self, l: &Layout) -> Result<(Storage, Duration)> {
        let _op = self.profiled(Op::ToVec, crate::profile::Work::Unpriced);
        let whole = l.is_contiguous() && l.offset == 0 && l.numel() == self.numel;
        let contiguous;
        let src = if whole {
            self
        } else {
            contiguous = self.copy_as(l, self.dtype)?;
            &contiguous
        };
        src.wait_for_gpus_of_copy(Device::Cpu)?;
        let mut out = Storage::alloc(Device::Cpu, src.dtype, src.numel)?;
        let from = gpu_index(src.device());
        let started = Instant::now();
        copy::device_to_host_untimed(from, src.device_ptr(), out.bytes_mut())?;
        Ok((out, started.elapsed()))
    }

    /// A copy of the view `l` of a CPU storage in page-locked memory: from the driver when a
    /// GPU exists, real or emulated (its copy engine reads it directly), else host memory marked
    /// pinned, so transfers to a simulated GPU say "pinned" as they would on a real one.
    pub(crate) fn pinned_copy(&self, l: &Layout) -> Result<Storage> {
        if is_gpu(Device::Cuda(0)) {
            let mut s = Storage::alloc_pinned(self.dtype, l.numel(), None)?;
            s.write_view(&Layout::contiguous(l.shape.clone()), self, l)?;
            return Ok(s);
        }
        let mut s = self.copy_as(l, self.dtype)?;
        s.pinned = true;
        Ok(s)
    }
}

/// Whether the CUDA backend holds `device`'s memory (a real or emulated GPU): reached only
/// through the driver's copies.
fn is_gpu(device: Device) -> bool {
    device.kind().is_ok_and(DeviceKind::runs_gpu_backend)
}
