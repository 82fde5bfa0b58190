//! `.to()` and its family: the one function that copies a tensor across devices, measures the
//! copy, and records it on the new tensor and in the session's transfer log.

use std::time::{Duration, Instant};

use super::Tensor;
use crate::base::op::Op;
use crate::device::Device;
use crate::device::error::{Error, Result};
use crate::profile::OpScope;
use crate::storage;
use crate::transfer::inflight::{self, InFlight};
use crate::transfer::{Clock, CopyMode, HostMemoryKind, PeerCopy, Transfer, prediction, record};

/// What the profile's op for the copy `t` would take on the GPU it is priced for: the copy's own
/// prediction (a simulated device's), else, under `profile_as`, the copy priced for that GPU.
fn op_prediction(
    op: &OpScope,
    t: &Transfer,
    predicted: Option<&crate::transfer::PredictedCopy>,
) -> Option<Duration> {
    predicted.map(|p| p.duration).or_else(|| {
        let pinned = t.memory == HostMemoryKind::Pinned;
        let waits = t.mode != CopyMode::NonBlocking;
        let priced =
            crate::transfer::predicted::on(op.priced_for()?, t.from, t.to, t.bytes, pinned, waits);
        Some(priced.duration)
    })
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
        self.transfer_to(&Device::Cpu, true, false)
    }

    fn transfer_to(&self, device: &Device, pinned_dst: bool, non_blocking: bool) -> Result<Tensor> {
        if *device == self.device() {
            return Ok(self.clone());
        }
        device.check_available()?;
        let src = crate::tensor::autograd::no_grad(|| self.contiguous())?;
        let from = self.device();
        let memory = if src.is_pinned() || pinned_dst {
            HostMemoryKind::Pinned
        } else {
            HostMemoryKind::Pageable
        };
        let mode = match (
            non_blocking,
            from.is_cpu() && memory == HostMemoryKind::Pageable,
        ) {
            (false, _) => CopyMode::Blocking,
            (true, true) => CopyMode::NonBlockingFromPageable,
            (true, false) => CopyMode::NonBlocking,
        };
        let mut t = self.untimed_transfer(*device, memory, mode)?;
        inflight::poll();
        let out = if t.mode == CopyMode::NonBlocking {
            // Profiled as an op of its own: the host only queues it (`Op::ToNonBlocking`).
            let mut op = storage::profiled(t.to, Op::ToNonBlocking, crate::profile::Work::Unpriced);
            if let Some(op) = op.as_mut() {
                op.copying_from(t.from);
                op.add_predicted(op_prediction(op, &t, prediction(&t).as_ref()));
            }
            let start = Instant::now();
            let (storage, completion) = src.storage().transfer_non_blocking(*device, pinned_dst)?;
            t.wall = start.elapsed();
            t.between_gpus = completion.peer().map(peer_copy);
            // The copy reads a temporary when the source was strided: keep it until done.
            let keep_alive = (!src.shares_storage_with(self)).then(|| src.0.storage.clone());
            let f = InFlight::track(t, completion, keep_alive);
            src.storage().mark_in_flight(f.clone());
            storage.mark_in_flight(f.clone());
            Tensor::from_storage(storage, self.shape().to_vec()).in_flight(f)
        } else {
            self.blocking_copy(&src, t, pinned_dst)?
        };
        // Differentiable: the gradient flows back to the source device.
        Ok(crate::tensor::autograd::record(
            out,
            Op::To,
            &[self],
            crate::tensor::autograd::grads::identity,
        ))
    }

    /// This tensor's copy to `to`, as the log will hold it once timed. Creating a GPU's context
    /// happens here, outside the timed copy, and is reported apart.
    fn untimed_transfer(
        &self,
        to: Device,
        memory: HostMemoryKind,
        mode: CopyMode,
    ) -> Result<Transfer> {
        let from = self.device();
        let context_setup = storage::open_devices(&[from, to])?;
        Ok(Transfer {
            seq: 0,
            from,
            to,
            bytes: self.nbytes(),
            duration: Duration::ZERO,
            wall: Duration::ZERO,
            context_setup,
            memory,
            clock: Clock::timing([from.kind()?, to.kind()?]),
            mode,
            between_gpus: None,
            predicted: None,
            dtype: self.dtype(),
            shape: self.shape().to_vec(),
        })
    }

    /// Reads this tensor's values with `read`. From a GPU the values cross the bus, so the read
    /// is logged as a transfer, in `:transfers` and the cell's strip, as `.cpu()` is (PyTorch's
    /// `.item()` is a device-to-host copy too). A GPU's copy is timed on the host once the
    /// queued work is done (`Transfer::wall` holds the wait); a simulated GPU's values are in
    /// host memory, so its time is `read`'s own copy. The engine's reads (`values`) are not a
    /// user's transfer and are not logged.
    pub(crate) fn read_logged<R>(&self, read: impl FnOnce(&Tensor) -> Result<R>) -> Result<R> {
        if self.is_cpu() {
            return read(self);
        }
        let mut t =
            self.untimed_transfer(Device::Cpu, HostMemoryKind::Pageable, CopyMode::Blocking)?;
        let asked = Instant::now();
        let (host, gpu_copy) = self.host_copy()?;
        let copied = Instant::now();
        let values = read(&host)?;
        t.wall = asked.elapsed();
        t.duration = gpu_copy.unwrap_or_else(|| copied.elapsed());
        // A real GPU's read is timed by the host's clock, not by CUDA events (a stand-in's
        // clock keeps its word: its time is a host copy's).
        if gpu_copy.is_some() && t.clock == Clock::CudaEvents {
            t.clock = Clock::Host;
        }
        record(t);
        Ok(values)
    }

    /// Copies the contiguous `src` (this tensor's values) and records `t`, timed.
    fn blocking_copy(&self, src: &Tensor, mut t: Transfer, pinned_dst: bool) -> Result<Tensor> {
        let mut op = storage::profiled(t.to, Op::To, crate::profile::Work::Unpriced);
        if let Some(op) = op.as_mut() {
            op.copying_from(t.from);
        }
        let start = Instant::now();
        let (storage, gpu_time) = src.storage().transfer(t.to, pinned_dst)?;
        let wall = start.elapsed();
        t.duration = gpu_time.map_or(wall, |g| g.events);
        t.wall = gpu_time.map_or(wall, |g| g.wall);
        t.between_gpus = gpu_time.and_then(|g| g.peer).map(peer_copy);
        let t = record(t);
        if let Some(op) = op.as_mut() {
            op.add_predicted(op_prediction(op, &t, t.predicted.as_ref()));
        }
        Ok(Tensor::from_storage(storage, self.shape().to_vec()).with_transfer(t))
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
    /// directly. Needs a CUDA device (real or simulated), as in PyTorch. The memory comes from
    /// the pinned cache (`cuda::host_memory_stats`): repeated pins of one size lock pages once.
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
        if !crate::device::registry::is_available() {
            return Err(Error::DeviceUnavailable {
                device: Device::Cuda(0),
                reason: "pinned memory is page-locked for a GPU's copy engine, and there is no CUDA device".into(),
            });
        }
        if self.is_pinned() {
            return Ok(self.clone());
        }
        let s = self.storage().pinned_copy(self.layout())?;
        Ok(Tensor::from_storage(s, self.shape().to_vec()))
    }
}

/// How a GPU-to-GPU copy went, from whether it went peer to peer.
fn peer_copy(direct: bool) -> PeerCopy {
    if direct {
        PeerCopy::Direct
    } else {
        PeerCopy::StagedThroughHost
    }
}
