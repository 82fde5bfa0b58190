//! PyTorch's caching-allocator model, over any raw allocator (host memory, CUDA, simulated).
//!
//! The rules are those of `c10/cuda/CUDACachingAllocator.cpp` with its defaults:
//! requests round up to 512 B; requests ≤ 1 MiB come from a small pool of 2 MiB segments;
//! larger ones from a large pool (1–10 MiB requests get 20 MiB segments, larger ones a segment
//! rounded up to 2 MiB); best fit by (size, address); a block is split when the rest is
//! ≥ 512 B (small pool) or > 1 MiB (large pool); freed blocks merge with free neighbours of
//! the same segment; `empty_cache` returns every wholly free segment to the raw allocator.
//!
//! Streams, as PyTorch's: each segment belongs to the stream it was made for, and a block is
//! reused only by allocations on that stream, whose order keeps its old and new uses apart. A
//! block that other streams used too (`record_stream`) is freed with a `PendingUse` per stream
//! and goes back to its pool once all are done (`free_after`); its bytes leave
//! `allocated_bytes` at the free, as in PyTorch, and stay reserved.

use std::collections::{BTreeMap, BTreeSet};

use crate::device::current_stream::{DEFAULT_STREAM, StreamId};

pub const MIN_BLOCK_SIZE: usize = 512;
pub const SMALL_SIZE: usize = 1 << 20;
pub const SMALL_BUFFER: usize = 2 << 20;
pub const LARGE_BUFFER: usize = 20 << 20;
pub const MIN_LARGE_ALLOC: usize = 10 << 20;
pub const ROUND_LARGE: usize = 2 << 20;

/// Where segments come from: `cudaMalloc`/`cudaFree`, or their host and simulated stand-ins.
pub trait RawAllocator: Send {
    /// A fresh segment of exactly `size` bytes, or `None` when the device cannot hold it.
    fn alloc(&mut self, size: usize) -> Option<usize>;
    fn free(&mut self, addr: usize, size: usize);
    /// (free, total) bytes as the device's driver sees them.
    fn mem_info(&self) -> (usize, usize);
    /// Why the last failed `alloc` failed when it was not for lack of memory (a driver fault),
    /// taken once.
    fn take_failure(&mut self) -> Option<String> {
        None
    }
    /// `requested` bytes at `addr` were lent to a tensor, for work on `stream`. The emulator
    /// uses this and `returned` to let kernels touch only those bytes under AddressSanitizer.
    fn lent(&mut self, _addr: usize, _requested: usize, _stream: StreamId) {}
    /// The block of `size` bytes at `addr` came back to `stream`'s pool.
    fn returned(&mut self, _addr: usize, _size: usize, _stream: StreamId) {}
}

/// The work another stream had queued when a block it used was freed (PyTorch records an event
/// on that stream): the block is reused only once every one is done.
pub trait PendingUse: Send {
    /// Whether the stream has done that work (never waits).
    fn is_done(&self) -> bool;
    /// Waits until it has (or failed).
    fn wait(&self);
}

/// A block freed while other streams may still use it (`free_after`).
struct Pending {
    addr: usize,
    uses: Vec<Box<dyn PendingUse>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    Small,
    Large,
}

#[derive(Debug, Clone, Copy)]
struct BlockInfo {
    size: usize,
    segment: usize,
    allocated: bool,
    requested: usize,
}

#[derive(Debug, Clone, Copy)]
struct SegmentInfo {
    size: usize,
    pool: Pool,
    /// The stream whose allocations its blocks serve.
    stream: StreamId,
}

/// The allocator's counters, named as in `torch.cuda.memory_stats()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes in blocks handed out (rounded sizes): `memory_allocated()`.
    pub allocated_bytes: usize,
    pub peak_allocated_bytes: usize,
    /// Bytes in segments held from the raw allocator: `memory_reserved()`.
    pub reserved_bytes: usize,
    pub peak_reserved_bytes: usize,
    /// Bytes the callers asked for, before rounding.
    pub requested_bytes: usize,
    /// Live blocks (each tensor storage holds one).
    pub allocations: usize,
    pub peak_allocations: usize,
    pub segments: usize,
    /// Free bytes inside segments that also hold a live block (not releasable by `empty_cache`).
    pub inactive_split_bytes: usize,
    pub num_device_alloc: usize,
    pub num_device_free: usize,
    pub num_alloc_retries: usize,
    pub num_ooms: usize,
}

/// Why an allocation failed, with the numbers an out-of-memory message needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfMemory {
    pub requested: usize,
    pub free: usize,
    pub total: usize,
    pub allocated: usize,
    pub reserved: usize,
    /// Set when the device did not run out of memory but its driver failed (`take_failure`).
    pub driver_error: Option<String>,
    /// The cap on reserved bytes that stopped it (`set_limit`), if one did.
    pub allowed: Option<usize>,
}

pub struct CachingAllocator {
    raw: Box<dyn RawAllocator>,
    blocks: BTreeMap<usize, BlockInfo>,
    segments: BTreeMap<usize, SegmentInfo>,
    /// Free blocks of each pool ordered by (stream, size, address): best fit is the first of
    /// the stream's ≥ the request.
    free_small: BTreeSet<(StreamId, usize, usize)>,
    free_large: BTreeSet<(StreamId, usize, usize)>,
    /// Blocks freed while other streams may still use them, oldest first.
    pending: Vec<Pending>,
    stats: MemoryStats,
    /// The most bytes this allocator may reserve (PyTorch's `allowed_memory_maximum`, set by
    /// `set_per_process_memory_fraction`); `None`: the whole device.
    limit: Option<usize>,
}

pub fn round_size(size: usize) -> usize {
    if size < MIN_BLOCK_SIZE {
        MIN_BLOCK_SIZE
    } else {
        size.div_ceil(MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE
    }
}

pub fn pool_for(size: usize) -> Pool {
    if size <= SMALL_SIZE {
        Pool::Small
    } else {
        Pool::Large
    }
}

/// The segment size requested from the raw allocator for a block of `size` (already rounded).
pub fn segment_size(size: usize) -> usize {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

impl CachingAllocator {
    pub fn new(raw: Box<dyn RawAllocator>) -> Self {
        CachingAllocator {
            raw,
            blocks: BTreeMap::new(),
            segments: BTreeMap::new(),
            free_small: BTreeSet::new(),
            free_large: BTreeSet::new(),
            pending: Vec::new(),
            stats: MemoryStats::default(),
            limit: None,
        }
    }

    /// Caps the bytes this allocator reserves: a segment that would take it past `limit` is not
    /// asked of the device; the cache is released and, if that is not enough, the allocation
    /// fails as out of memory, naming the cap. `None` lifts it.
    pub fn set_limit(&mut self, limit: Option<usize>) {
        self.limit = limit;
    }

    /// A segment from the raw allocator, unless it would take the reserved bytes past the cap.
    fn alloc_segment(&mut self, size: usize) -> Option<usize> {
        if self
            .limit
            .is_some_and(|cap| self.stats.reserved_bytes + size > cap)
        {
            return None;
        }
        self.raw.alloc(size)
    }

    /// Bytes of the blocks handed out now (`stats().allocated_bytes`, without walking the blocks).
    pub fn allocated_bytes(&self) -> usize {
        self.stats.allocated_bytes
    }

    pub fn stats(&self) -> MemoryStats {
        let mut s = self.stats;
        s.inactive_split_bytes = self
            .blocks
            .values()
            .filter(|b| !b.allocated && b.size != self.segments[&b.segment].size)
            .map(|b| b.size)
            .sum();
        s
    }

    pub fn mem_info(&self) -> (usize, usize) {
        self.raw.mem_info()
    }

    fn free_set(&mut self, pool: Pool) -> &mut BTreeSet<(StreamId, usize, usize)> {
        match pool {
            Pool::Small => &mut self.free_small,
            Pool::Large => &mut self.free_large,
        }
    }

    /// `malloc_on` the default stream.
    pub fn malloc(&mut self, requested: usize) -> Result<(usize, usize), OutOfMemory> {
        self.malloc_on(requested, DEFAULT_STREAM)
    }

    /// Hands out a block of at least `requested` bytes for work on `stream`; returns its address
    /// and rounded size. `requested == 0` gets no block (address 0, size 0) and changes no
    /// counter.
    pub fn malloc_on(
        &mut self,
        requested: usize,
        stream: StreamId,
    ) -> Result<(usize, usize), OutOfMemory> {
        if requested == 0 {
            return Ok((0, 0));
        }
        self.release_done();
        let size = round_size(requested);
        let pool = pool_for(size);
        let fit = self
            .free_set(pool)
            .range((stream, size, 0)..=(stream, usize::MAX, usize::MAX))
            .next()
            .copied();
        let addr = match fit {
            Some((_, _, addr)) => addr,
            None => self.new_segment(requested, size, pool, stream)?,
        };
        let found = self.blocks[&addr].size;
        self.free_set(pool).remove(&(stream, found, addr));
        let block = self
            .blocks
            .get_mut(&addr)
            .expect("free block is in the block map");
        let remaining = block.size - size;
        let split = match pool {
            Pool::Small => remaining >= MIN_BLOCK_SIZE,
            Pool::Large => remaining > SMALL_SIZE,
        };
        if split {
            block.size = size;
            let rest = BlockInfo {
                size: remaining,
                segment: block.segment,
                allocated: false,
                requested: 0,
            };
            self.blocks.insert(addr + size, rest);
            self.free_set(pool).insert((stream, remaining, addr + size));
        }
        let block = self.blocks.get_mut(&addr).expect("block just taken");
        block.allocated = true;
        block.requested = requested;
        let size = block.size;
        let s = &mut self.stats;
        s.allocated_bytes += size;
        s.requested_bytes += requested;
        s.allocations += 1;
        s.peak_allocated_bytes = s.peak_allocated_bytes.max(s.allocated_bytes);
        s.peak_allocations = s.peak_allocations.max(s.allocations);
        self.raw.lent(addr, requested, stream);
        Ok((addr, size))
    }

    fn failure(&self, requested: usize, driver_error: Option<String>) -> OutOfMemory {
        let (free, total) = self.raw.mem_info();
        OutOfMemory {
            requested,
            free,
            total,
            allocated: self.stats.allocated_bytes,
            reserved: self.stats.reserved_bytes,
            allowed: self.limit.filter(|cap| {
                self.stats.reserved_bytes + segment_size(round_size(requested)) > *cap
            }),
            driver_error,
        }
    }

    /// Gets a segment from the raw allocator; on failure releases the cache and tries once more.
    fn new_segment(
        &mut self,
        requested: usize,
        size: usize,
        pool: Pool,
        stream: StreamId,
    ) -> Result<usize, OutOfMemory> {
        let seg_size = segment_size(size);
        let addr = match self.alloc_segment(seg_size) {
            Some(a) => a,
            None => {
                if let Some(e) = self.raw.take_failure() {
                    // A driver fault, not a full device: releasing the cache would not help.
                    return Err(self.failure(requested, Some(e)));
                }
                self.stats.num_alloc_retries += 1;
                self.empty_cache();
                match self.alloc_segment(seg_size) {
                    Some(a) => a,
                    None => {
                        let driver_error = self.raw.take_failure();
                        if driver_error.is_none() {
                            self.stats.num_ooms += 1;
                        }
                        return Err(self.failure(requested, driver_error));
                    }
                }
            }
        };
        self.segments.insert(
            addr,
            SegmentInfo {
                size: seg_size,
                pool,
                stream,
            },
        );
        self.blocks.insert(
            addr,
            BlockInfo {
                size: seg_size,
                segment: addr,
                allocated: false,
                requested: 0,
            },
        );
        self.free_set(pool).insert((stream, seg_size, addr));
        let s = &mut self.stats;
        s.reserved_bytes += seg_size;
        s.peak_reserved_bytes = s.peak_reserved_bytes.max(s.reserved_bytes);
        s.segments += 1;
        s.num_device_alloc += 1;
        Ok(addr)
    }

    /// Returns a block to its pool at once (`free_after` with no other stream's use).
    pub fn free(&mut self, addr: usize) {
        self.free_after(addr, Vec::new());
    }

    /// Frees the block at `addr`: its bytes leave the allocated counts now (its requested bytes
    /// once it is back in its pool, as in PyTorch); it goes back to its pool once every one of
    /// `uses` is done (at once when there is none), merged with free
    /// neighbours of its segment.
    pub fn free_after(&mut self, addr: usize, uses: Vec<Box<dyn PendingUse>>) {
        if addr == 0 {
            return;
        }
        let Some(block) = self.blocks.get(&addr) else {
            debug_assert!(false, "free of an address the allocator never handed out");
            return;
        };
        debug_assert!(block.allocated, "double free");
        let size = block.size;
        let s = &mut self.stats;
        s.allocated_bytes -= size;
        s.allocations -= 1;
        if uses.is_empty() {
            self.release(addr);
        } else {
            self.pending.push(Pending { addr, uses });
        }
    }

    /// Returns the pending blocks whose streams are done with them to their pools.
    fn release_done(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let (done, waiting) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| p.uses.iter().all(|u| u.is_done()));
        self.pending = waiting;
        for p in done {
            self.release(p.addr);
        }
    }

    /// Waits for every pending block's streams and returns the blocks to their pools (before the
    /// cache is released, as PyTorch's `synchronize_and_free_events`).
    fn release_all_pending(&mut self) {
        for p in std::mem::take(&mut self.pending) {
            p.uses.iter().for_each(|u| u.wait());
            self.release(p.addr);
        }
    }

    /// How many freed blocks wait for other streams before they can be reused.
    pub fn pending_frees(&self) -> usize {
        self.pending.len()
    }

    /// Puts the block at `addr` back in its pool, merged with its free neighbours.
    fn release(&mut self, addr: usize) {
        let block = self
            .blocks
            .get_mut(&addr)
            .expect("a freed block is in the block map");
        block.allocated = false;
        let (size, segment) = (block.size, block.segment);
        // As PyTorch's `free_block`: the requested bytes leave when the block is back in a pool.
        self.stats.requested_bytes -= block.requested;
        let SegmentInfo { pool, stream, .. } = self.segments[&segment];
        self.raw.returned(addr, size, stream);
        let mut start = addr;
        let mut total = size;
        // Merge with the following block.
        let next = addr + size;
        if let Some(n) = self.blocks.get(&next).copied()
            && n.segment == segment
            && !n.allocated
        {
            self.free_set(pool).remove(&(stream, n.size, next));
            self.blocks.remove(&next);
            total += n.size;
        }
        // Merge with the preceding block.
        if let Some((&p_addr, &p)) = self.blocks.range(..addr).next_back()
            && p.segment == segment
            && !p.allocated
            && p_addr + p.size == addr
        {
            self.free_set(pool).remove(&(stream, p.size, p_addr));
            self.blocks.remove(&addr);
            start = p_addr;
            total += p.size;
        }
        let merged = self.blocks.get_mut(&start).expect("merged block exists");
        merged.size = total;
        merged.requested = 0;
        self.free_set(pool).insert((stream, total, start));
    }

    /// Returns every wholly free segment to the raw allocator; returns the bytes released.
    pub fn empty_cache(&mut self) -> usize {
        self.release_all_pending();
        let whole: Vec<(usize, SegmentInfo)> = self
            .segments
            .iter()
            .filter(|(addr, seg)| {
                let b = self.blocks[addr];
                !b.allocated && b.size == seg.size
            })
            .map(|(a, s)| (*a, *s))
            .collect();
        let mut released = 0;
        for (addr, seg) in whole {
            self.free_set(seg.pool)
                .remove(&(seg.stream, seg.size, addr));
            self.blocks.remove(&addr);
            self.segments.remove(&addr);
            self.raw.free(addr, seg.size);
            self.stats.reserved_bytes -= seg.size;
            self.stats.segments -= 1;
            self.stats.num_device_free += 1;
            released += seg.size;
        }
        released
    }

    /// Sets every peak to its current value (`reset_peak_memory_stats`).
    pub fn reset_peak(&mut self) {
        let s = &mut self.stats;
        s.peak_allocated_bytes = s.allocated_bytes;
        s.peak_reserved_bytes = s.reserved_bytes;
        s.peak_allocations = s.allocations;
    }

    /// Every segment with its blocks, in address order (for summaries and segment maps).
    pub fn segments(&self) -> Vec<Segment> {
        self.segments
            .iter()
            .map(|(&address, seg)| Segment {
                address,
                size: seg.size,
                blocks: self
                    .blocks
                    .range(address..address + seg.size)
                    .map(|(&a, b)| BlockSpan {
                        offset: a - address,
                        size: b.size,
                        allocated: b.allocated,
                    })
                    .collect(),
            })
            .collect()
    }
}

/// One segment held from the raw allocator, and how it is carved into blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub address: usize,
    pub size: usize,
    pub blocks: Vec<BlockSpan>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSpan {
    pub offset: usize,
    pub size: usize,
    pub allocated: bool,
}

impl Drop for CachingAllocator {
    /// Returns the cached segments; only called once no block is live (blocks hold the allocator).
    fn drop(&mut self) {
        for p in std::mem::take(&mut self.pending) {
            p.uses.iter().for_each(|u| u.wait());
        }
        for (&addr, seg) in &self.segments {
            self.raw.free(addr, seg.size);
        }
    }
}

#[cfg(test)]
mod tests;
