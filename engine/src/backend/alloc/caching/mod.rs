//! PyTorch's caching-allocator model, over any raw allocator (host memory, CUDA, simulated).
//!
//! The rules are those of `c10/cuda/CUDACachingAllocator.cpp` with its defaults:
//! requests round up to 512 B; requests ≤ 1 MiB come from a small pool of 2 MiB segments;
//! larger ones from a large pool (1–10 MiB requests get 20 MiB segments, larger ones a segment
//! rounded up to 2 MiB); best fit by (size, address); a block is split when the rest is
//! ≥ 512 B (small pool) or > 1 MiB (large pool); freed blocks merge with free neighbours of
//! the same segment; `empty_cache` returns every wholly free segment to the raw allocator.

use std::collections::{BTreeMap, BTreeSet};

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
    /// `requested` bytes at `addr` were lent to a tensor. The emulator uses this and `returned`
    /// to let kernels touch only those bytes under AddressSanitizer.
    fn lent(&mut self, _addr: usize, _requested: usize) {}
    /// The block of `size` bytes at `addr` came back from its tensor.
    fn returned(&mut self, _addr: usize, _size: usize) {}
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
}

pub struct CachingAllocator {
    raw: Box<dyn RawAllocator>,
    blocks: BTreeMap<usize, BlockInfo>,
    segments: BTreeMap<usize, SegmentInfo>,
    /// Free blocks of each pool ordered by (size, address): best fit is the first ≥ the request.
    free_small: BTreeSet<(usize, usize)>,
    free_large: BTreeSet<(usize, usize)>,
    stats: MemoryStats,
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
            stats: MemoryStats::default(),
        }
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

    fn free_set(&mut self, pool: Pool) -> &mut BTreeSet<(usize, usize)> {
        match pool {
            Pool::Small => &mut self.free_small,
            Pool::Large => &mut self.free_large,
        }
    }

    /// Hands out a block of at least `requested` bytes; returns its address and rounded size.
    /// `requested == 0` gets no block (address 0, size 0) and changes no counter.
    pub fn malloc(&mut self, requested: usize) -> Result<(usize, usize), OutOfMemory> {
        if requested == 0 {
            return Ok((0, 0));
        }
        let size = round_size(requested);
        let pool = pool_for(size);
        let addr = match self.free_set(pool).range((size, 0)..).next().copied() {
            Some((_, addr)) => addr,
            None => self.new_segment(requested, size, pool)?,
        };
        let found = self.blocks[&addr].size;
        self.free_set(pool).remove(&(found, addr));
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
            self.free_set(pool).insert((remaining, addr + size));
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
        self.raw.lent(addr, requested);
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
            driver_error,
        }
    }

    /// Gets a segment from the raw allocator; on failure releases the cache and tries once more.
    fn new_segment(
        &mut self,
        requested: usize,
        size: usize,
        pool: Pool,
    ) -> Result<usize, OutOfMemory> {
        let seg_size = segment_size(size);
        let addr = match self.raw.alloc(seg_size) {
            Some(a) => a,
            None => {
                if let Some(e) = self.raw.take_failure() {
                    // A driver fault, not a full device: releasing the cache would not help.
                    return Err(self.failure(requested, Some(e)));
                }
                self.stats.num_alloc_retries += 1;
                self.empty_cache();
                match self.raw.alloc(seg_size) {
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
        self.free_set(pool).insert((seg_size, addr));
        let s = &mut self.stats;
        s.reserved_bytes += seg_size;
        s.peak_reserved_bytes = s.peak_reserved_bytes.max(s.reserved_bytes);
        s.segments += 1;
        s.num_device_alloc += 1;
        Ok(addr)
    }

    /// Returns a block to its pool at once, merging it with free neighbours of its segment.
    pub fn free(&mut self, addr: usize) {
        if addr == 0 {
            return;
        }
        let Some(block) = self.blocks.get_mut(&addr) else {
            debug_assert!(false, "free of an address the allocator never handed out");
            return;
        };
        debug_assert!(block.allocated, "double free");
        block.allocated = false;
        let (size, requested, segment) = (block.size, block.requested, block.segment);
        self.raw.returned(addr, size);
        let pool = self.segments[&segment].pool;
        let s = &mut self.stats;
        s.allocated_bytes -= size;
        s.requested_bytes -= requested;
        s.allocations -= 1;

        let mut start = addr;
        let mut total = size;
        // Merge with the following block.
        let next = addr + size;
        if let Some(n) = self.blocks.get(&next).copied()
            && n.segment == segment
            && !n.allocated
        {
            self.free_set(pool).remove(&(n.size, next));
            self.blocks.remove(&next);
            total += n.size;
        }
        // Merge with the preceding block.
        if let Some((&p_addr, &p)) = self.blocks.range(..addr).next_back()
            && p.segment == segment
            && !p.allocated
            && p_addr + p.size == addr
        {
            self.free_set(pool).remove(&(p.size, p_addr));
            self.blocks.remove(&addr);
            start = p_addr;
            total += p.size;
        }
        let merged = self.blocks.get_mut(&start).expect("merged block exists");
        merged.size = total;
        merged.requested = 0;
        self.free_set(pool).insert((total, start));
    }

    /// Returns every wholly free segment to the raw allocator; returns the bytes released.
    pub fn empty_cache(&mut self) -> usize {
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
            self.free_set(seg.pool).remove(&(seg.size, addr));
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
        for (&addr, seg) in &self.segments {
            self.raw.free(addr, seg.size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A raw allocator that hands out fake addresses from a fixed capacity.
    struct Fake {
        next: usize,
        used: usize,
        capacity: usize,
    }
    impl RawAllocator for Fake {
        fn alloc(&mut self, size: usize) -> Option<usize> {
            if self.used + size > self.capacity {
                return None;
            }
            self.used += size;
            self.next += size + (1 << 30);
            Some(self.next)
        }
        fn free(&mut self, _addr: usize, size: usize) {
            self.used -= size;
        }
        fn mem_info(&self) -> (usize, usize) {
            (self.capacity - self.used, self.capacity)
        }
    }

    fn alloc(capacity: usize) -> CachingAllocator {
        CachingAllocator::new(Box::new(Fake {
            next: 0,
            used: 0,
            capacity,
        }))
    }

    #[test]
    fn pytorch_worked_example() {
        let mut a = alloc(1 << 40);
        let (_one, s) = a.malloc(4).unwrap();
        assert_eq!(s, 512);
        assert_eq!(
            (a.stats().allocated_bytes, a.stats().reserved_bytes),
            (512, 2_097_152)
        );
        let (x, _) = a.malloc(4_000_000).unwrap();
        assert_eq!(
            (a.stats().allocated_bytes, a.stats().reserved_bytes),
            (4_000_768, 23_068_672)
        );
        let (y, _) = a.malloc(4_000_000).unwrap();
        assert_eq!(a.stats().allocated_bytes, 8_001_024);
        assert_eq!(a.stats().reserved_bytes, 23_068_672);
        a.free(x);
        a.empty_cache();
        assert_eq!(
            (a.stats().allocated_bytes, a.stats().reserved_bytes),
            (4_000_768, 23_068_672)
        );
        assert_eq!(a.stats().peak_allocated_bytes, 8_001_024);
        a.reset_peak();
        assert_eq!(a.stats().peak_allocated_bytes, 4_000_768);
        a.free(y);
        a.empty_cache();
        assert_eq!(
            (a.stats().allocated_bytes, a.stats().reserved_bytes),
            (512, 2_097_152)
        );
    }

    #[test]
    fn segment_sizes() {
        assert_eq!(segment_size(round_size(1 << 20)), SMALL_BUFFER);
        assert_eq!(round_size((1 << 20) + 1), 1_049_088);
        assert_eq!(segment_size(1_049_088), LARGE_BUFFER);
        assert_eq!(segment_size(10 << 20), 10 << 20);
        assert_eq!(segment_size(round_size(11_000_000)), 12 << 20);
        let mut a = alloc(1 << 40);
        a.malloc(3 << 30).unwrap();
        assert_eq!(a.stats().reserved_bytes, 3_221_225_472);
    }

    #[test]
    fn freed_blocks_are_reused_and_merged() {
        let mut a = alloc(1 << 40);
        let (p, _) = a.malloc(1000).unwrap();
        let (q, _) = a.malloc(1000).unwrap();
        assert_eq!(q, p + 1024);
        a.free(p);
        let (r, _) = a.malloc(600).unwrap();
        assert_eq!(r, p, "best fit reuses the freed block");
        a.free(r);
        a.free(q);
        // Everything merged back into one free 2 MiB block.
        assert_eq!(
            a.segments()[0].blocks,
            vec![BlockSpan {
                offset: 0,
                size: SMALL_BUFFER,
                allocated: false
            }]
        );
        assert_eq!(a.stats().inactive_split_bytes, 0);
    }

    #[test]
    fn out_of_memory_releases_cache_then_reports() {
        let mut a = alloc(64 << 20);
        let (x, _) = a.malloc(30 << 20).unwrap();
        a.free(x);
        assert_eq!(a.stats().reserved_bytes, 30 << 20);
        // 40 MiB does not fit beside the cached 30 MiB segment: the cache is released first.
        a.malloc(40 << 20).unwrap();
        assert_eq!(a.stats().num_alloc_retries, 1);
        assert_eq!(a.stats().reserved_bytes, 40 << 20);
        let err = a.malloc(40 << 20).unwrap_err();
        assert_eq!(err.requested, 40 << 20);
        assert_eq!(err.free, 24 << 20);
        assert_eq!(a.stats().num_ooms, 1);
    }
}
