//! The caching allocator's rules, on a raw allocator of fake addresses.

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

#[test]
fn a_limit_caps_the_reserved_bytes_as_pytorchs_memory_fraction_does() {
    // A device of 1 GiB capped at 64 MiB: the cap binds, not the device.
    let mut a = alloc(1 << 30);
    a.set_limit(Some(64 << 20));
    let (x, _) = a.malloc(30 << 20).unwrap();
    a.free(x);
    // 40 MiB does not fit under the cap beside the cached 30 MiB: the cache is released first.
    let (y, _) = a.malloc(40 << 20).unwrap();
    assert_eq!(a.stats().num_alloc_retries, 1);
    let err = a.malloc(30 << 20).unwrap_err();
    assert_eq!(
        (err.allowed, err.free),
        (Some(64 << 20), (1 << 30) - (40 << 20))
    );
    assert_eq!(a.stats().num_ooms, 1);
    // Exactly at the cap is within it; a failure the cap did not cause does not name it.
    a.free(y);
    a.empty_cache();
    a.malloc(64 << 20).unwrap();
    a.set_limit(None);
    assert_eq!(a.malloc(2 << 30).unwrap_err().allowed, None);
}

/// A stream's work, done or not, as a test says.
struct Use(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl PendingUse for Use {
    fn is_done(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn wait(&self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn each_stream_reuses_only_its_own_blocks() {
    let mut a = alloc(1 << 40);
    let (on_side, _) = a.malloc_on(1000, 1).unwrap();
    a.free(on_side);
    let (on_default, _) = a.malloc_on(1000, DEFAULT_STREAM).unwrap();
    assert_ne!(
        on_default, on_side,
        "the default stream took a side stream's block"
    );
    assert_eq!(a.stats().segments, 2, "one small segment per stream");
    let (again, _) = a.malloc_on(1000, 1).unwrap();
    assert_eq!(again, on_side, "the side stream reuses its own block");
}

#[test]
fn a_block_another_stream_used_waits_for_that_stream_and_counts_as_pytorch_does() {
    let mut a = alloc(1 << 40);
    let (x, size) = a.malloc(4096).unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    a.free_after(x, vec![Box::new(Use(done.clone()))]);
    // PyTorch: the bytes leave memory_allocated at the free; the segment stays reserved.
    assert_eq!(a.stats().allocated_bytes, 0);
    assert_eq!(a.stats().reserved_bytes, SMALL_BUFFER);
    assert_eq!(a.pending_frees(), 1);
    let (y, _) = a.malloc(4096).unwrap();
    assert_ne!(
        y, x,
        "a block was reused before the other stream's work was done"
    );
    a.free(y);
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (z, _) = a.malloc(4096).unwrap();
    assert_eq!(z, x, "the block comes back once the other stream is done");
    assert_eq!(a.pending_frees(), 0);
    assert_eq!(a.stats().allocated_bytes, size);
}

#[test]
fn empty_cache_waits_for_pending_blocks_then_releases_their_segments() {
    let mut a = alloc(1 << 40);
    let (x, _) = a.malloc(4096).unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    a.free_after(x, vec![Box::new(Use(done.clone()))]);
    assert_eq!(a.empty_cache(), SMALL_BUFFER);
    assert!(
        done.load(std::sync::atomic::Ordering::SeqCst),
        "empty_cache did not wait"
    );
    assert_eq!((a.stats().reserved_bytes, a.pending_frees()), (0, 0));
}
