//! Copies of a whole storage to another device (blocking, or queued and tracked while in
//! flight) and host copies of GPU views for reading: the backend matching that `.to()` needs.

use std::sync::Arc;
use std::time::Instant;

use super::{Storage, gpu_index};
use crate::cpu;
use crate::cuda::copy::{self, CopyTime, Timing};
use crate::cuda::ops;
use crate::inflight::{Completion, InFlight};
use crate::layout::Layout;
use crate::{Device, Result};

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
            cpu::copy_bytes(self.bytes(), out.bytes_mut());
            return Ok((out, None));
        }
        let (out, timing) = self.gpu_copy(device, pinned_dst)?;
        Ok((out, Some(timing.wait()?)))
    }

    /// Queues a copy of the whole storage on `device` and returns before it finishes; both
    /// storages must then be marked with the copy's `InFlight` (`mark_in_flight`). Between
    /// host-backed storages a host thread does the copy.
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
        // Waits for earlier copies into the source. Once marked with the new copy's `InFlight`,
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
                crate::Error::invalid(
                    ".to_non_blocking()",
                    format!("could not start the copy thread: {e}"),
                )
            })?;
        Ok((out, Completion::Thread(thread)))
    }

    /// Whether a copy to `device` is between host-backed storages (no real GPU involved).
    fn stays_on_host(&self, device: Device) -> bool {
        self.is_host() && !crate::cuda::is_real(device)
    }

    /// Queues a copy that a real GPU's copy engine does.
    fn gpu_copy(&self, device: Device, pinned_dst: bool) -> Result<(Storage, Timing)> {
        match (self.is_host(), crate::cuda::is_real(device)) {
            (true, true) => copy::host_to_device(self, gpu_index(device)),
            (false, false) => copy::device_to_host(self, pinned_dst),
            (false, true) => copy::device_to_device(self, gpu_index(device)),
            (true, false) => unreachable!("a host-to-host copy needs no GPU"),
        }
    }

    /// Records that a non-blocking copy reads or writes these bytes: host access and freeing
    /// wait for it.
    pub(crate) fn mark_in_flight(&self, f: &Arc<InFlight>) {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(f.clone());
    }

    /// A host copy of the view `l` of a GPU storage, contiguous, for reading values.
    pub(crate) fn read_back(&self, l: &Layout) -> Result<Storage> {
        if l.is_contiguous() && l.offset == 0 && l.numel() == self.numel {
            return copy::read_back(self);
        }
        copy::read_back(&ops::cast(self, l, self.dtype)?)
    }
}
