//! Checks a kernel makes as it runs, reported on the host at its next wait for the device.
//!
//! `nll_loss` builds its rows from the class indices where they are (`class_rows` in
//! `kernels/gather.cu`), and `index_select` gathers at the entries of its index tensor where they
//! are (`index_select_*`): checking them on the host would mean reading them back, a wait that
//! drained the device's queue twice a training step and cost a gather 2.4 times PyTorch's time
//! on an H100. So the kernel checks each index and, for one out of range, writes it into a slot
//! of a small block of page-locked host memory, which kernels reach at its host address (CUDA's
//! unified addressing). The host reads the slots in use the next time it waits for the device
//! anyway (a value read back, `cuda::synchronize`: `Gpu::read_checks` in `runtime.rs`) as plain
//! memory, with no copy: reading them through a device-to-host copy cost every such wait a
//! transfer, and a timed gather 1.6-1.9 times PyTorch's time on an H200. A failure is reported
//! there, as `Error::FoundOnDevice`. PyTorch checks on the device too, with an assert that ends
//! the CUDA context for the rest of the process; here the session goes on.
//!
//! In a REPL or notebook the next wait may be a later cell's, so the end of each cell reads them
//! too (`runtime::read_checks_at_cell_end`, asked by the front end through the probe): a device
//! with checks queued is waited for, and a failure is the error of the cell that queued the op.
//! If the user interrupts that wait, the checks still running are marked (`outlived_cell`), and
//! their error says an earlier cell queued them.

use super::call::DriverError;
use super::driver::Driver;
use crate::device::error::Error;

/// How many checks may wait to be read at once; one more makes the host wait and read them.
const SLOTS: usize = 64;
/// One slot: the index found out of range (i64), then 1 once one was.
const SLOT_BYTES: usize = 16;

/// A check queued on the device and not yet read: what its error names.
struct Pending {
    op: &'static str,
    dim: usize,
    size: usize,
    /// The cell that queued it ended before its kernel ran (`outlived_cell`).
    outlived_cell: bool,
}

/// A device's check slots and the checks queued into them.
#[derive(Default)]
pub(crate) struct Checks {
    /// The slots' page-locked host memory (its address, which is also the kernels'), taken from
    /// the driver at the first check (outside the caching allocators, so the memory a learner's
    /// tensors use reads as in PyTorch) and kept.
    slots: Option<u64>,
    pending: Vec<Pending>,
}

impl Checks {
    /// Whether every slot holds a check not yet read.
    pub(crate) fn is_full(&self) -> bool {
        self.pending.len() == SLOTS
    }

    /// How many checks are queued and not yet read.
    pub(crate) fn queued(&self) -> usize {
        self.pending.len()
    }

    /// The slots' block, allocated and zeroed at the first call, and marked usable for the
    /// kernels (`Driver::mark_block`) before anything is queued that writes it.
    pub(crate) fn slots(&mut self, driver: &Driver) -> Result<u64, DriverError> {
        if let Some(base) = self.slots {
            return Ok(base);
        }
        let bytes = SLOTS * SLOT_BYTES;
        let block = driver.malloc_host(bytes)?;
        // SAFETY: a fresh block of `bytes` bytes that nothing else uses yet.
        unsafe { std::ptr::write_bytes(block, 0, bytes) };
        // Page-locked memory from the driver is reachable from every device at the address the
        // host uses (unified addressing, which every 64-bit CUDA platform has).
        let base = block as u64;
        // On the stream the first checking kernel is about to be queued on.
        driver.mark_block(block as usize, bytes, true, driver.current());
        self.slots = Some(base);
        Ok(base)
    }

    /// Queues a check of `op`'s indices along `dim` (of `size`) into the next slot of the block
    /// at `base` (`slots`), and returns the slot's address for the kernel. The caller has made
    /// room (`is_full`).
    pub(crate) fn queue(&mut self, base: u64, op: &'static str, dim: usize, size: usize) -> u64 {
        let slot = self.pending.len();
        self.pending.push(Pending {
            op,
            dim,
            size,
            outlived_cell: false,
        });
        base + (slot * SLOT_BYTES) as u64
    }

    /// Marks the checks queued so far as left running by a cell that has ended.
    pub(crate) fn outlived_cell(&mut self) {
        for p in &mut self.pending {
            p.outlived_cell = true;
        }
    }

    /// Reads the checks queued before a wait for the device that has just ended (so every kernel
    /// that could write a slot is done), and frees their slots: the first that failed, as the
    /// error its op would have raised on the host, and whether its cell had ended before it ran
    /// (`outlived_cell`). Nothing queued costs nothing.
    pub(crate) fn read(&mut self) -> Option<(Error, bool)> {
        let (Some(base), n) = (self.slots, self.pending.len()) else {
            return None;
        };
        let slot = |i: usize| (base as usize + i * SLOT_BYTES) as *mut i64;
        let pending = std::mem::take(&mut self.pending);
        // Volatile: the device wrote these words, behind the compiler's back.
        // SAFETY: slot `i < n ≤ SLOTS` lies in the block, and no kernel writes it any more.
        let word = |i: usize, at: usize| unsafe { std::ptr::read_volatile(slot(i).add(at)) };
        let failed = (pending.iter().enumerate())
            .find(|&(i, _)| word(i, 1) != 0)
            .map(|(i, p)| (p, word(i, 0)));
        let (p, index) = failed?;
        // The slots are zeroed again before any later kernel can write one.
        for i in 0..n {
            // SAFETY: as above.
            unsafe { std::ptr::write_bytes(slot(i) as *mut u8, 0, SLOT_BYTES) };
        }
        let cause = Error::IndexOutOfRange {
            op: p.op,
            index,
            dim: p.dim,
            size: p.size,
        };
        Some((cause, p.outlived_cell))
    }
}
