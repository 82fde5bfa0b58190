//! Page-locked host memory, cached as PyTorch's `CachingHostAllocator` caches it: locking pages
//! (`cuMemHostAlloc`) costs milliseconds for tens of MiB, so a freed block goes to a free list of
//! its size class and the next request of that class takes it back without the driver. A block
//! freed while a non-blocking copy may still read or write it waits in a pending list until that
//! copy has completed (checked at each request, never waited for). `empty_cache` gives the free
//! blocks back to the driver; a request the driver refuses gives them back and tries once more.
//!
//! Size classes: powers of two up to 1 MiB (as PyTorch's), then sixteen classes per doubling, so
//! a large request takes at most 1/16 more than it asked (PyTorch's power-of-two classes can take
//! nearly twice: 65 MiB costs it 128 MiB).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::call::DriverResult;
use super::runtime::{Gpu, first_open, gpu};
use crate::device::error::{Error, Result};

/// Whether a copy that used a freed block has finished (never waits).
pub(crate) type CopyDone = Box<dyn Fn() -> bool + Send>;

/// What the pinned-memory cache holds and has done, as `torch.cuda.host_memory_stats()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostMemoryStats {
    /// Bytes of the blocks pinned tensors hold (their size classes), now and at most.
    pub allocated_bytes: usize,
    pub peak_allocated_bytes: usize,
    /// Bytes page-locked from the driver: held, cached free, and waiting for a copy.
    pub reserved_bytes: usize,
    pub peak_reserved_bytes: usize,
    /// Blocks pinned tensors hold now.
    pub active: u64,
    /// Requests served, and how many of them the driver had to serve.
    pub allocations: u64,
    pub driver_allocations: u64,
    pub driver_frees: u64,
    /// Time spent in the driver's `cuMemHostAlloc` and `cuMemFreeHost`.
    pub driver_alloc_time: Duration,
    pub driver_free_time: Duration,
}

/// A block of page-locked memory: its address, its size class, and the context that made it.
struct LockedBlock {
    ptr: usize,
    size: usize,
    gpu: Arc<Gpu>,
}

#[derive(Default)]
struct Cache {
    free: BTreeMap<usize, Vec<LockedBlock>>,
    pending: Vec<(LockedBlock, CopyDone)>,
    stats: HostMemoryStats,
}

fn cache() -> MutexGuard<'static, Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    (CACHE.get_or_init(Default::default).lock()).unwrap_or_else(|e| e.into_inner())
}

/// The size class a request of `bytes` takes.
pub(crate) fn size_class(bytes: usize) -> usize {
    let bytes = bytes.max(512);
    let octave = bytes.next_power_of_two();
    if octave <= 1 << 20 {
        return octave;
    }
    let step = octave / 32; // sixteen classes between octave / 2 and octave
    bytes.div_ceil(step) * step
}

/// Page-locked host memory for one pinned CPU storage, from the cache.
pub(crate) struct PinnedHost {
    /// `None` once handed back (`release_after`).
    block: Option<LockedBlock>,
    /// What the storage asked for (its size class may be larger).
    bytes: usize,
}

impl PinnedHost {
    /// `bytes` of page-locked memory: a cached block of its class, or a new one through
    /// `cuda:near`'s context, or (`None`) that of a GPU already in use. Pinning never creates a
    /// context (and takes its memory) on a GPU the program does not use; only when none is in
    /// use yet does it open `cuda:0`.
    pub(crate) fn alloc(bytes: usize, near: Option<usize>) -> Result<PinnedHost> {
        let size = size_class(bytes);
        let block = match take_cached(size) {
            Some(block) => block,
            None => {
                let g = gpu(near.or_else(first_open).unwrap_or(0))?;
                let ptr = lock_pages(bytes, size, |size| driver_alloc(&g, size))?;
                let mut c = cache();
                c.stats.allocations += 1;
                count_held(&mut c.stats, size);
                LockedBlock { ptr, size, gpu: g }
            }
        };
        Ok(PinnedHost {
            block: Some(block),
            bytes,
        })
    }

    fn block(&self) -> &LockedBlock {
        self.block
            .as_ref()
            .expect("pinned memory used after it was released")
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.block().ptr as *mut u8
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Gives the block back to the cache once `done` says the copies that may still use it have
    /// finished; the cache checks at each later request and never waits.
    pub(crate) fn release_after(&mut self, done: CopyDone) {
        if let Some(block) = self.block.take() {
            give_back(block, Some(done));
        }
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            give_back(block, None);
        }
    }
}

/// A new page-locked block of class `size` for a request of `bytes`, from `alloc` (the driver).
/// The driver may refuse because the cache holds locked pages: then they are given back and
/// `alloc` asked once more; a second refusal is the error, naming the sizes.
fn lock_pages(
    bytes: usize,
    size: usize,
    alloc: impl Fn(usize) -> DriverResult<usize>,
) -> Result<usize> {
    if let Ok(ptr) = alloc(size) {
        return Ok(ptr);
    }
    let released = empty_cache();
    alloc(size).map_err(|_| Error::PinnedOutOfMemory {
        requested: bytes,
        released,
        held: stats().allocated_bytes,
        available: crate::backend::alloc::host::host_memory_info().0,
    })
}

/// A block no tensor holds any more: free at once, or pending while `done` says a copy may
/// still use it. `done` runs outside the cache's lock (completing a copy may free other storages).
fn give_back(block: LockedBlock, done: Option<CopyDone>) {
    let pending = done.filter(|done| !done());
    let mut c = cache();
    c.stats.allocated_bytes -= block.size;
    c.stats.active -= 1;
    match pending {
        Some(done) => c.pending.push((block, done)),
        None => c.free.entry(block.size).or_default().push(block),
    }
}

fn count_held(s: &mut HostMemoryStats, size: usize) {
    s.active += 1;
    s.allocated_bytes += size;
    s.peak_allocated_bytes = s.peak_allocated_bytes.max(s.allocated_bytes);
}

/// A cached block of class `size`, after moving blocks whose copies have finished to the free
/// lists.
fn take_cached(size: usize) -> Option<LockedBlock> {
    sweep_pending();
    let mut c = cache();
    let block = c.free.get_mut(&size).and_then(Vec::pop)?;
    c.stats.allocations += 1;
    count_held(&mut c.stats, size);
    Some(block)
}

/// Moves the pending blocks whose copies have finished to the free lists. The checks run, and
/// their closures are dropped, outside the cache's lock (as in `give_back`).
fn sweep_pending() {
    let pending = std::mem::take(&mut cache().pending);
    let (finished, running): (Vec<_>, Vec<_>) = pending.into_iter().partition(|(_, done)| done());
    let finished: Vec<LockedBlock> = finished.into_iter().map(|(block, _)| block).collect();
    let mut c = cache();
    c.pending.extend(running);
    for block in finished {
        c.free.entry(block.size).or_default().push(block);
    }
}

fn driver_alloc(g: &Gpu, size: usize) -> DriverResult<usize> {
    let start = Instant::now();
    let ptr = g.driver.malloc_host(size)? as usize;
    let mut c = cache();
    let s = &mut c.stats;
    s.driver_allocations += 1;
    s.driver_alloc_time += start.elapsed();
    s.reserved_bytes += size;
    s.peak_reserved_bytes = s.peak_reserved_bytes.max(s.reserved_bytes);
    Ok(ptr)
}

/// Gives every cached free block back to the driver (blocks held by tensors, or waiting for a
/// copy, stay); returns the bytes given back. `torch._C._host_emptyCache()`.
pub fn empty_cache() -> usize {
    sweep_pending();
    let blocks: Vec<LockedBlock> = std::mem::take(&mut cache().free)
        .into_values()
        .flatten()
        .collect();
    let mut released = 0;
    for b in blocks {
        let start = Instant::now();
        // SAFETY: a free block: no tensor holds it and no copy uses it.
        unsafe { b.gpu.driver.free_host(b.ptr as *mut u8, b.size) };
        let mut c = cache();
        c.stats.driver_frees += 1;
        c.stats.driver_free_time += start.elapsed();
        c.stats.reserved_bytes -= b.size;
        released += b.size;
    }
    released
}

/// The cache's figures now.
pub fn stats() -> HostMemoryStats {
    cache().stats
}

/// Bytes of page-locked host memory held by pinned tensors (their blocks' size classes).
pub fn pinned_bytes() -> usize {
    stats().allocated_bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::gpu::call::DriverError;
    use crate::backend::gpu::runtime::standalone_emulated;

    #[test]
    fn size_classes_waste_at_most_a_sixteenth_above_a_mebibyte() {
        assert_eq!(size_class(1), 512);
        assert_eq!(size_class(3000), 4096);
        assert_eq!(size_class(1 << 20), 1 << 20);
        assert_eq!(size_class((1 << 20) + 1), (1 << 20) + (1 << 16));
        assert_eq!(size_class(64 << 20), 64 << 20);
        assert_eq!(size_class(65 << 20), 68 << 20);
        for bytes in [(1 << 20) + 1, 3 << 20, 100_000_000, 1 << 30] {
            let class = size_class(bytes);
            assert!(
                class >= bytes && class - bytes <= bytes / 16,
                "{bytes} → {class}"
            );
        }
    }

    /// A request the driver refuses twice fails, after the cache gave its free blocks back, with
    /// an error that names the request and what was given back.
    #[test]
    fn a_refused_request_releases_the_cache_then_says_what_it_asked() {
        let g = Arc::new(standalone_emulated(1 << 20));
        let size = size_class(5 << 20);
        let ptr = driver_alloc(&g, size).unwrap();
        cache().stats.active += 1;
        cache().stats.allocated_bytes += size;
        give_back(LockedBlock { ptr, size, gpu: g }, None);
        let asked = std::sync::atomic::AtomicUsize::new(0);
        let refuse = |_: usize| {
            asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(DriverError::OutOfMemory)
        };
        let e = lock_pages(1 << 40, size_class(1 << 40), refuse).unwrap_err();
        assert_eq!(
            asked.into_inner(),
            2,
            "asked once, then once more after releasing"
        );
        let msg = e.to_string();
        assert!(
            msg.starts_with("could not pin 1.00 TiB of host memory")
                && msg.contains("the pinned cache gave back")
                && msg.contains("Pin less at once"),
            "{msg}"
        );
    }
}
