//! The caching allocator's numbers, exactly as PyTorch's rules give them, on the CPU and on a
//! simulated GPU. One test binary, and one lock, so no other test's tensors disturb the counts.

#[path = "support/stand_in.rs"]
mod stand_in;

use std::sync::Mutex;

use placelab::prelude::*;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn worked_example(device: Device) {
    // Start from an empty cache and fresh peaks (other tests of this binary ran before).
    memory::empty_cache(&device).unwrap();
    memory::reset_peak(&device).unwrap();
    assert_eq!(
        (
            memory::allocated(&device).unwrap(),
            memory::reserved(&device).unwrap()
        ),
        (0, 0)
    );
    let small = Tensor::zeros([1], device).unwrap();
    let big = Tensor::randn([1000, 1000], device).unwrap();
    assert_eq!(memory::allocated(&device).unwrap(), 4_000_768, "{device}");
    assert_eq!(memory::reserved(&device).unwrap(), 23_068_672, "{device}");
    let s = memory::stats(&device).unwrap();
    assert_eq!(
        (s.allocations, s.segments, s.requested_bytes),
        (2, 2, 4_000_004)
    );
    drop(big);
    assert_eq!(
        memory::allocated(&device).unwrap(),
        512,
        "dropping the last handle frees at once"
    );
    assert_eq!(
        memory::reserved(&device).unwrap(),
        23_068_672,
        "the block stays in the cache"
    );
    assert_eq!(
        memory::stats(&device).unwrap().peak_allocated_bytes,
        4_000_768
    );
    assert_eq!(memory::empty_cache(&device).unwrap(), 20 << 20);
    assert_eq!(memory::reserved(&device).unwrap(), 2_097_152);
    memory::reset_peak(&device).unwrap();
    assert_eq!(memory::stats(&device).unwrap().peak_allocated_bytes, 512);
    drop(small);
    memory::empty_cache(&device).unwrap();
    assert_eq!(
        (
            memory::allocated(&device).unwrap(),
            memory::reserved(&device).unwrap()
        ),
        (0, 0)
    );
}

#[test]
fn pytorch_numbers_on_cpu_and_simulated_gpu() {
    let _g = serial();
    stand_in::gpus(2, None).unwrap();
    worked_example(Device::Cpu);
    worked_example(Device::Cuda(0));
    // The cuda:: functions read the same allocator.
    let x = Tensor::ones([256], Device::Cuda(1)).unwrap();
    assert_eq!(cuda::memory_allocated(1).unwrap(), 1024);
    assert_eq!(cuda::memory_reserved(1).unwrap(), 2 << 20);
    assert_eq!(cuda::max_memory_allocated(1).unwrap(), 1024);
    drop(x);
    assert_eq!(cuda::empty_cache(), 2 << 20);
    assert_eq!(cuda::memory_reserved(1).unwrap(), 0);
}

#[test]
fn views_share_storage_and_keep_it_alive() {
    let _g = serial();
    stand_in::gpus(2, None).unwrap();
    let d = Device::Cuda(0);
    let before = memory::allocated(&d).unwrap();
    let x = Tensor::randn([512, 512], d).unwrap(); // 1 MiB: small pool
    let v = x.t().unwrap().narrow(0, 0, 10).unwrap();
    assert!(v.shares_storage_with(&x));
    assert_eq!(memory::allocated(&d).unwrap() - before, 1 << 20);
    drop(x);
    assert_eq!(
        memory::allocated(&d).unwrap() - before,
        1 << 20,
        "the view still holds the storage"
    );
    let live = memory::live_storages(&d).unwrap();
    assert!(
        live.iter()
            .any(|l| l.id == v.storage_id() && l.numel == 512 * 512 && l.requested == 1 << 20)
    );
    drop(v);
    assert_eq!(memory::allocated(&d).unwrap(), before);
}

#[test]
fn freed_blocks_are_reused_without_new_segments() {
    let _g = serial();
    let d = Device::Cpu;
    let a = Tensor::randn([10_000_000], d).unwrap();
    let segs = memory::stats(&d).unwrap().num_device_alloc;
    for _ in 0..5 {
        let b = a.relu().unwrap();
        drop(b);
    }
    assert_eq!(
        memory::stats(&d).unwrap().num_device_alloc,
        segs + 1,
        "one new segment, then reuse"
    );
}

#[test]
fn out_of_memory_is_an_error_with_the_numbers() {
    let _g = serial();
    let e = Tensor::zeros([1usize << 40], Device::Cpu).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, Error::OutOfMemory { requested, .. } if requested == 1usize << 42),
        "{msg}"
    );
    assert!(
        msg.contains("tried to allocate 4.00 TiB") && msg.contains("is free"),
        "{msg}"
    );

    stand_in::gpus(2, None).unwrap();
    let d = Device::Cuda(1);
    let keep = Tensor::ones([1024, 1024], d).unwrap();
    let e = Tensor::zeros([5usize << 30], d).unwrap_err(); // 20 GiB on a 16 GiB device
    match &e {
        Error::OutOfMemory {
            device,
            requested,
            total,
            allocated,
            ..
        } => {
            assert_eq!(
                (*device, *requested, *total, *allocated),
                (d, 20 << 30, 16 << 30, 4 << 20)
            );
        }
        other => panic!("expected OutOfMemory, got {other}"),
    }
    assert!(e.to_string().contains("out of memory on cuda:1"), "{e}");
    assert!(!e.to_string().contains("fragmentation"), "{e}");
    assert_eq!(cuda::memory_stats(1).unwrap().num_ooms, 1);
    // Nothing was lost: the device still works and holds what it held.
    assert_eq!(
        keep.sum_all().unwrap().item::<f32>().unwrap(),
        (1024 * 1024) as f32
    );
    drop(keep);
}

/// A class sharing one GPU: each process capped at a share of it
/// (`cuda::set_per_process_memory_fraction`, as PyTorch's). Past the cap the cache is released
/// and the allocation fails, naming the cap; another device, and what was held, are untouched.
#[test]
fn a_per_process_memory_fraction_caps_what_the_cache_reserves() {
    let _g = serial();
    stand_in::gpus(2, Some(1 << 30)).unwrap();
    let (d, other) = (Device::Cuda(0), Device::Cuda(1));
    cuda::set_per_process_memory_fraction(0.25, 0).unwrap(); // 256 MiB of 1 GiB
    assert_eq!(cuda::get_per_process_memory_fraction(0).unwrap(), 0.25);
    assert_eq!(cuda::get_per_process_memory_fraction(1).unwrap(), 1.0);
    let floats = |mib: usize| [mib << 18];
    let within = Tensor::zeros(floats(160), d).unwrap();
    let e = Tensor::zeros(floats(160), d).unwrap_err();
    match &e {
        Error::OutOfMemory {
            allowed: Some(cap),
            requested,
            ..
        } => assert_eq!((*cap, *requested), (256 << 20, 160 << 20)),
        other => panic!("expected the cap's OutOfMemory, got {other}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("tried to allocate 160.00 MiB, past this process's cap of 256.00 MiB (0.25 of the device's 1.00 GiB")
            && msg.contains("`cuda::set_per_process_memory_fraction(f, 0)`"),
        "{msg}"
    );
    let elsewhere = Tensor::zeros(floats(512), other).unwrap();
    // Freed, the block stays cached and is handed out again within the cap.
    drop(within);
    let again = Tensor::zeros(floats(160), d).unwrap();
    assert_eq!(cuda::memory_reserved(0).unwrap(), 160 << 20);
    let bad = cuda::set_per_process_memory_fraction(1.5, 0).unwrap_err();
    assert!(
        bad.to_string()
            .contains("the fraction is 1.5: give a fraction of the device's memory from 0 to 1"),
        "{bad}"
    );
    cuda::set_per_process_memory_fraction(1.0, 0).unwrap();
    drop((again, elsewhere));
}

/// A kernel left idle gives its GPU caches back (`PLACELAB_IDLE_EMPTY_CACHE` in a class's
/// kernelspec), and the release is kept for the next cell's strip to say.
#[test]
fn an_idle_process_gives_its_gpu_caches_back() {
    use std::time::{Duration, Instant};
    let _g = serial();
    stand_in::gpus(2, Some(1 << 30)).unwrap();
    let d = Device::Cuda(0);
    memory::empty_cache(&d).unwrap();
    let seen = memory::idle::releases_since(0).last().map_or(0, |r| r.seq);
    drop(Tensor::zeros([1usize << 20], d).unwrap()); // 4 MiB: a 20 MiB segment, kept cached
    assert_eq!(cuda::memory_reserved(0).unwrap(), 20 << 20);
    memory::set_idle_release(Some(Duration::from_millis(200)));
    // Waits for the release itself, for as long as a busy machine may need.
    let deadline = Instant::now() + Duration::from_secs(120);
    let released = loop {
        let mine = memory::idle::releases_since(seen)
            .into_iter()
            .find(|r| r.device == d);
        if let Some(r) = mine {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "the idle cache was never released"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    memory::set_idle_release(None);
    assert_eq!(released.bytes, 20 << 20);
    assert!(released.idle >= Duration::from_millis(200), "{released:?}");
    assert_eq!(cuda::memory_reserved(0).unwrap(), 0);
}

#[test]
fn fragmentation_is_what_empty_cache_cannot_release_and_the_error_says_so() {
    let _g = serial();
    stand_in::gpus(1, Some(64 << 20)).unwrap();
    let mib = |n: usize| Tensor::zeros([n << 18], Device::Cuda(0)).unwrap();
    // Eight 5 MiB tensors fill two 20 MiB segments; dropping every other one leaves four holes,
    // each between two live tensors.
    let eight: Vec<Tensor> = (0..8).map(|_| mib(5)).collect();
    let kept: Vec<Tensor> = eight.into_iter().step_by(2).collect();
    let stats = cuda::memory_stats(0).unwrap();
    assert_eq!(
        (stats.allocated_bytes, stats.reserved_bytes),
        (20 << 20, 40 << 20)
    );
    assert_eq!(stats.inactive_split_bytes, 20 << 20, "the holes");
    assert_eq!(cuda::empty_cache(), 0, "each segment holds a live tensor");
    // 9 MiB fits no 5 MiB hole: a third segment, and 11 MiB more in pieces.
    let nine = mib(9);
    let stats = cuda::memory_stats(0).unwrap();
    assert_eq!(
        (stats.reserved_bytes, stats.inactive_split_bytes),
        (60 << 20, 31 << 20)
    );
    assert!(
        cuda::memory_summary(0)
            .unwrap()
            .lines()
            .any(|l| l.starts_with("| Non-releasable memory") && l.contains("31744 KiB")),
        "{}",
        cuda::memory_summary(0).unwrap()
    );
    // 12 MiB needs a segment of its own: 4 MiB of the device is left, and 31 MiB of the cache
    // is free in pieces. The error says which.
    let e = Tensor::zeros([3usize << 20], Device::Cuda(0)).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("tried to allocate 12.00 MiB but only 4.00 MiB of 64.00 MiB is free")
            && msg.contains("The cache holds 31.00 MiB free, enough in all, but in pieces")
            && msg.contains("fragmentation"),
        "{msg}"
    );
    // Dropping the tensors that share the segments makes them whole, and releasable.
    drop((kept, nine));
    assert_eq!(cuda::empty_cache(), 60 << 20);
    assert!(Tensor::zeros([3usize << 20], Device::Cuda(0)).is_ok());
    stand_in::gpus(2, None).unwrap();
}

#[test]
fn summary_lists_counters_and_live_tensors() {
    let _g = serial();
    stand_in::gpus(2, None).unwrap();
    let x = Tensor::zeros([1000, 1000], Device::Cuda(0)).unwrap();
    let s = cuda::memory_summary(0).unwrap();
    assert!(
        s.contains(&format!(
            "placelab memory summary, cuda:0 ({})",
            stand_in::label()
        )),
        "{s}"
    );
    assert!(
        s.contains("Allocated memory") && s.contains("Reserved memory"),
        "{s}"
    );
    assert!(s.contains(&format!("#{}", x.storage_id())), "{s}");
    assert!(
        s.lines().all(|l| l.chars().count() <= 75),
        "75 columns, like PyTorch's:\n{s}"
    );
}

/// The tests above, again on emulated devices: the CUDA backend and `kernels/*.cu` do the work.
#[test]
fn every_test_again_on_emulated_devices() {
    stand_in::rerun_emulated("every_test_again_on_emulated_devices");
}
