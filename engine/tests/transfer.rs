//! `.to()` and friends: copies that leave the original alone, measured and logged.

#[path = "support/own_process.rs"]
mod own_process;
#[path = "support/stand_in.rs"]
mod stand_in;

use placelab::prelude::*;
use placelab::transfer::{CopyMode, HostMemoryKind};

static SEEDED: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn to_copies_and_records_the_transfer() {
    stand_in::gpus(2, None).unwrap();
    let x = Tensor::arange(0.0, 6.0, Device::Cpu)
        .unwrap()
        .reshape([2, 3])
        .unwrap();
    let seq = transfer::last_seq();
    let y = x.to(&Device::Cuda(0)).unwrap();
    assert_eq!(x.device(), Device::Cpu, "the original stays where it was");
    assert_eq!(y.device(), Device::Cuda(0));
    assert!(!y.shares_storage_with(&x));
    assert_eq!(
        y.to_vec::<f32>().unwrap(),
        vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    );
    let t = y
        .last_transfer()
        .expect("a transfer is recorded on the new tensor");
    assert_eq!(
        (t.from, t.to, t.bytes, t.memory),
        (Device::Cpu, Device::Cuda(0), 24, HostMemoryKind::Pageable)
    );
    assert_eq!(
        t.clock,
        stand_in::clock(),
        "a simulated device says how its time was obtained"
    );
    assert!(
        t.to_string().starts_with("cpu → cuda:0, ")
            && t.to_string()
                .contains(&format!("{}: host copy time", stand_in::label())),
        "{t}"
    );
    assert!(
        transfer::log_since(seq).iter().any(|l| l.seq == t.seq),
        "and in the session's log"
    );
    assert!(x.last_transfer().is_none());

    // cuda:0 → cuda:1 → cpu.
    let z = y.cuda_at(1).unwrap().cpu().unwrap();
    assert_eq!(z.last_transfer().unwrap().route(), "cuda:1 → cpu");
    assert_eq!(
        z.to_vec2::<f32>().unwrap(),
        vec![vec![0.0, 1.0, 2.0], vec![3.0, 4.0, 5.0]]
    );
}

#[test]
fn to_the_same_device_returns_the_same_storage_and_records_nothing() {
    stand_in::gpus(2, None).unwrap();
    let x = {
        let _g = SEEDED.lock().unwrap_or_else(|e| e.into_inner());
        Tensor::randn([4, 4], Device::Cuda(0)).unwrap()
    };
    let seq = transfer::last_seq();
    let same = x.to(&Device::Cuda(0)).unwrap();
    assert!(same.shares_storage_with(&x));
    assert!(same.last_transfer().is_none());
    assert!(
        transfer::log_since(seq)
            .iter()
            .all(|t| t.shape != vec![4, 4] || t.from != Device::Cuda(0))
    );
    assert!(
        x.cpu().unwrap().cpu().unwrap().last_transfer().is_some(),
        "cpu() of a CPU tensor keeps its record"
    );
}

/// A 0-d CPU tensor meets a GPU tensor as in PyTorch, and costs what PyTorch's does: its value
/// is made on the GPU (PyTorch passes it to the kernel), so no copy crosses the bus or waits, in
/// every dtype, exactly. One that needs a gradient is moved, and logged, so that its gradient
/// reaches it on the CPU.
#[test]
fn a_cpu_scalar_meets_a_gpu_tensor_without_a_copy() {
    stand_in::gpus(2, None).unwrap();
    let (cpu, gpu) = (Device::Cpu, Device::Cuda(0));
    let scalar_copies = |since| {
        transfer::log_since(since)
            .iter()
            .filter(|t| t.shape.is_empty() && t.from == cpu && t.to == gpu)
            .count()
    };
    let y = Tensor::from_vec(vec![1.0f32, -2.0, 3.0], [3], gpu).unwrap();
    let big = Tensor::from_vec(vec![1i64 << 53, 0], [2], gpu).unwrap();
    let half = Tensor::from_vec(vec![half::f16::from_f32(2.0)], [1], gpu).unwrap();
    let seq = transfer::last_seq();
    let scale = Tensor::scalar(0.5, cpu).unwrap();
    assert_eq!(
        (&y * &scale).unwrap().to_vec::<f32>().unwrap(),
        [0.5, -1.0, 1.5]
    );
    let one = Tensor::scalar(1i64, (DType::I64, cpu)).unwrap();
    assert_eq!(
        (&big + &one).unwrap().to_vec::<i64>().unwrap(),
        [(1 << 53) + 1, 1],
        "an i64 beyond f64's integers stays exact"
    );
    let fine = Tensor::scalar(1.0009766, (DType::F16, cpu)).unwrap();
    let product = (&half * &fine).unwrap();
    assert_eq!(product.dtype(), DType::F16);
    assert_eq!(
        product.to_vec::<half::f16>().unwrap()[0].to_f32(),
        2.0019531
    );
    let zero = Tensor::scalar(0.0, cpu).unwrap();
    assert_eq!(
        y.gt(&zero).unwrap().to_vec::<bool>().unwrap(),
        [true, false, true]
    );
    assert_eq!(scalar_copies(seq), 0, "{:?}", transfer::log_since(seq));

    let seq = transfer::last_seq();
    let learned = Tensor::scalar(2.0, cpu)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    (&y * &learned)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(scalar_copies(seq), 1, "{:?}", transfer::log_since(seq));
    let grad = learned.grad().expect("the gradient reaches the CPU scalar");
    assert_eq!((grad.device(), grad.item::<f32>().unwrap()), (cpu, 2.0));
}

/// Which constructors copy, as in PyTorch: values from the host (`from_vec`, and `Tensor::new`
/// and `tensor!` under a GPU default) cross the bus and are logged like a `.to()`; those that
/// fill on the device (`zeros`, `ones`, `full`, `arange`) copy nothing.
#[test]
fn constructors_from_host_values_log_their_copy() {
    stand_in::gpus(2, None).unwrap();
    let gpu = Device::Cuda(0);
    let seq = transfer::last_seq();
    let values = Tensor::from_vec(vec![1.0f32; 7], [7], gpu).unwrap();
    let sent = values.last_transfer().expect("the values crossed the bus");
    assert_eq!(
        (sent.from, sent.to, sent.bytes, sent.shape.clone()),
        (Device::Cpu, gpu, 28, vec![7])
    );
    let logged = transfer::log_since(seq);
    assert!(
        logged.iter().any(|t| t.seq == sent.seq),
        "the copy is in the log: {logged:?}"
    );
    let filled = [
        Tensor::zeros([7, 2], gpu).unwrap(),
        Tensor::ones([7, 2], gpu).unwrap(),
        Tensor::full([7, 2], 3, gpu).unwrap(),
        Tensor::arange(0, 14, gpu).unwrap(),
    ];
    assert!(filled.iter().all(|t| t.last_transfer().is_none()));
    let filled_copies = transfer::log_since(seq)
        .into_iter()
        .filter(|t| t.to == gpu && (t.shape == [7, 2] || t.shape == [14]))
        .count();
    assert_eq!(filled_copies, 0);
}

#[test]
fn reading_a_gpu_tensor_is_logged_as_a_download_and_the_engines_reads_are_not() {
    stand_in::gpus(2, None).unwrap();
    let gpu = Device::Cuda(0);
    // Shapes no other test reads, since the log is the whole process's.
    let x = Tensor::ones([3, 7], gpu).unwrap();
    let seq = transfer::last_seq();
    let one = x.sum_all().unwrap().reshape([1, 1, 1]).unwrap();
    assert_eq!(one.item::<f32>().unwrap(), 21.0);
    assert_eq!(x.to_vec2::<f32>().unwrap(), vec![vec![1.0; 7]; 3]);
    let reads: Vec<_> = transfer::log_since(seq)
        .into_iter()
        .filter(|t| t.from == gpu && (t.shape == [1, 1, 1] || t.shape == [3, 7]))
        .map(|t| (t.to, t.bytes, t.shape, t.memory, t.clock))
        .collect();
    let (pageable, clock) = (HostMemoryKind::Pageable, stand_in::clock());
    assert_eq!(
        reads,
        vec![
            (Device::Cpu, 4, vec![1, 1, 1], pageable, clock),
            (Device::Cpu, 84, vec![3, 7], pageable, clock)
        ],
        "`item` and `to_vec2` each copy the values to the host, as `.cpu()` does"
    );

    // A loss reads its targets' classes, and `index_select` its indices: neither is the user's.
    let targets = Tensor::from_vec(vec![0i64, 2, 1, 0, 2], [5], gpu).unwrap();
    let rows = Tensor::from_vec(vec![2i64, 0, 1, 1, 0, 2], [6], gpu).unwrap();
    let seq = transfer::last_seq();
    let scores = Tensor::zeros([5, 3], gpu).unwrap();
    let loss = placelab::nn::CrossEntropyLoss::new()
        .forward(&scores, &targets)
        .unwrap();
    let picked = x.index_select(0, &rows).unwrap();
    assert_eq!((loss.device(), picked.shape()), (gpu, &[6, 7][..]));
    let engine_reads: Vec<_> = transfer::log_since(seq)
        .into_iter()
        .filter(|t| t.from == gpu && t.dtype == DType::I64 && (t.shape == [5] || t.shape == [6]))
        .collect();
    assert!(engine_reads.is_empty(), "{engine_reads:?}");
}

#[test]
fn non_contiguous_views_transfer_their_elements() {
    stand_in::gpus(2, None).unwrap();
    let x = Tensor::arange(0, 12, Device::Cpu)
        .unwrap()
        .reshape([3, 4])
        .unwrap();
    let v = x.t().unwrap().narrow(0, 1, 2).unwrap(); // columns 1 and 2
    let g = v.to(&Device::Cuda(1)).unwrap();
    assert_eq!(g.shape(), &[2, 3]);
    assert_eq!(g.to_vec::<i64>().unwrap(), vec![1, 5, 9, 2, 6, 10]);
    assert_eq!(g.last_transfer().unwrap().bytes, 48);
}

#[test]
fn pinned_memory_is_recorded_as_pinned() {
    stand_in::gpus(2, None).unwrap();
    let x = Tensor::ones([1000], Device::Cpu).unwrap();
    let p = x.pin_memory().unwrap();
    assert!(p.is_pinned() && !x.is_pinned());
    let g = p.cuda().unwrap();
    assert_eq!(g.last_transfer().unwrap().memory, HostMemoryKind::Pinned);
    assert_eq!(
        x.cuda().unwrap().last_transfer().unwrap().memory,
        HostMemoryKind::Pageable
    );
    assert!(
        g.pin_memory()
            .unwrap_err()
            .to_string()
            .contains("only CPU tensors can be pinned")
    );
    // A download into pinned memory is one pinned transfer, logged and carried, on every
    // stand-in (a simulated GPU once logged a pageable download, then pinned a copy of it).
    let since = transfer::last_seq();
    let back = g.cpu_pinned().unwrap();
    assert!(back.is_pinned());
    let t = back
        .last_transfer()
        .expect("cpu_pinned carries its download");
    assert_eq!(
        (t.from, t.to, t.bytes, t.memory),
        (Device::Cuda(0), Device::Cpu, 4000, HostMemoryKind::Pinned)
    );
    // The log is the process's: tests on other threads log their copies in it too, so only
    // pinned downloads count (this test alone makes them).
    let pinned_downloads: Vec<_> = transfer::log_since(since)
        .into_iter()
        .filter(|l| l.to == Device::Cpu && l.memory == HostMemoryKind::Pinned)
        .map(|l| l.seq)
        .collect();
    assert_eq!(pinned_downloads, vec![t.seq], "one copy, logged once");
    assert_eq!(back.to_vec::<f32>().unwrap(), vec![1.0; 1000]);
}

#[test]
fn cuda_past_the_device_count_is_an_error() {
    stand_in::gpus(2, None).unwrap();
    let x = Tensor::ones([3], Device::Cpu).unwrap();
    let e = x.to(&Device::Cuda(7)).unwrap_err().to_string();
    assert!(
        e.contains("cuda:7 is not available")
            && e.contains(&format!(
                "2 {} CUDA device(s), cuda:0 to cuda:1",
                stand_in::label()
            )),
        "{e}"
    );
    let e = Tensor::zeros([2], Device::Cuda(2)).unwrap_err().to_string();
    assert!(e.contains("cuda:2 is not available"), "{e}");
    let e = "cuda:99"
        .parse::<Device>()
        .unwrap()
        .check_available()
        .unwrap_err()
        .to_string();
    assert!(e.contains("cuda:99"), "{e}");
}

#[test]
fn same_seed_same_values_on_every_device() {
    stand_in::gpus(2, None).unwrap();
    // One generator serves every device: hold the seed lock, so no test on another thread
    // draws between the seed and the draw.
    let _g = SEEDED.lock().unwrap_or_else(|e| e.into_inner());
    // 100,000 normals: about 3,000 of them take the ziggurat's slow path.
    type Draw = fn(Device) -> Tensor;
    let draws: [(&str, Draw); 5] = [
        ("randn", |d| Tensor::randn([100_000], d).unwrap()),
        ("randn f64", |d| {
            Tensor::randn([100_001], (DType::F64, d)).unwrap()
        }),
        ("rand", |d| Tensor::rand([4099], d).unwrap()),
        ("rand f64", |d| {
            Tensor::rand([4099], (DType::F64, d)).unwrap()
        }),
        ("randint", |d| {
            Tensor::randint(-1000, 1000, [4099], d).unwrap()
        }),
    ];
    for (what, draw) in draws {
        let values = |device| {
            manual_seed(7);
            let t = draw(device);
            assert_eq!(t.device(), device);
            t.to_f64_vec().unwrap()
        };
        let on_cpu = values(Device::Cpu);
        for gpu in [Device::Cuda(0), Device::Cuda(1)] {
            // Bit for bit: the f64 comparison holds every f32 value exactly.
            assert!(
                on_cpu == values(gpu),
                "{what} on {gpu} differs from the CPU's"
            );
        }
    }
}

/// The one test that makes copies in flight, so `transfer::pending()` counts only its own.
#[test]
fn non_blocking_copies_overlap_and_synchronize_completes_them() {
    stand_in::gpus(2, None).unwrap();
    let n = 16 << 20; // 64 MiB of f32: a copy that runs for milliseconds, not microseconds.
    let x = Tensor::arange(0.0, n as f64, Device::Cpu)
        .unwrap()
        .pin_memory()
        .unwrap();
    let seq = transfer::last_seq();
    let y = x.to_non_blocking(&Device::Cuda(0)).unwrap();
    let queued = y.transfer_in_flight().cloned();
    if let Some(q) = &queued {
        // Still copying: the card says so instead of a time nobody knows yet.
        assert_eq!(q.route(), "cpu → cuda:0");
        assert_eq!(
            q.duration,
            std::time::Duration::ZERO,
            "the copy's time is not known yet"
        );
        let header = placelab::display::header(&y, false);
        assert!(
            header.contains("non-blocking, still copying (cuda::synchronize(0) waits for it)"),
            "{header}"
        );
    }
    // The source may be dropped at once: its memory outlives the copy.
    drop(x);
    cuda::synchronize(0).unwrap();
    assert!(y.transfer_in_flight().is_none());
    assert_eq!(transfer::pending(), 0);
    let t = y.last_transfer().unwrap().clone();
    assert_eq!(
        (t.mode, t.memory, t.clock, t.bytes),
        (
            CopyMode::NonBlocking,
            HostMemoryKind::Pinned,
            stand_in::clock(),
            n * 4
        )
    );
    // Whether the call returned before the copy ended is the scheduler's to decide on a loaded
    // machine (the copy's thread may run to its end before the caller is scheduled again), so
    // `wall < duration` would be a race. What the record must show does not depend on it: the
    // call's own time, measured when it returned and kept as it was, and the copy's, measured by
    // its thread (or the stream's events) and filled in on completion, both taken.
    assert!(
        t.wall > std::time::Duration::ZERO && t.duration > std::time::Duration::ZERO,
        "both times measured: {t:?}"
    );
    if let Some(q) = &queued {
        assert_eq!(
            (q.wall, q.seq),
            (t.wall, 0),
            "the call's time kept as queued; a seq only once logged"
        );
    }
    assert!(
        t.to_string().contains("non-blocking: .to() returned after"),
        "{t}"
    );
    assert!(
        transfer::log_since(seq).iter().any(|l| l.seq == t.seq),
        "synchronize logs the completed copy"
    );
    let last = y.narrow(0, n - 2, 2).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(last, vec![(n - 2) as f32, (n - 1) as f32]);

    // Back to the CPU: the copy lands in pinned memory, and reading it right away waits for
    // the copy instead of showing whatever the buffer held.
    let z = (&y * 2.0).unwrap().to_non_blocking(&Device::Cpu).unwrap();
    assert!(z.is_pinned() && z.is_cpu());
    let v = z.to_vec::<f32>().unwrap();
    assert_eq!((v[1], v[n - 1]), (2.0, 2.0 * (n - 1) as f32));
    assert!(z.transfer_in_flight().is_none());

    // A strided source is copied from a contiguous temporary, kept until the copy is done.
    let m = Tensor::arange(0.0, 6.0, Device::Cuda(0))
        .unwrap()
        .reshape([2, 3])
        .unwrap();
    let mt = m.t().unwrap().to_non_blocking(&Device::Cpu).unwrap();
    cuda::synchronize(0).unwrap();
    assert_eq!(
        mt.to_vec2::<f32>().unwrap(),
        vec![vec![0.0, 3.0], vec![1.0, 4.0], vec![2.0, 5.0]]
    );

    // GPU to GPU, then synchronize on the destination; dropping an in-flight tensor waits
    // for its copy before its memory goes back to the cache.
    let w = y.to_non_blocking(&Device::Cuda(1)).unwrap();
    let dropped = y.to_non_blocking(&Device::Cuda(1)).unwrap();
    drop(dropped);
    cuda::synchronize(1).unwrap();
    assert_eq!(w.last_transfer().unwrap().route(), "cuda:0 → cuda:1");
    assert_eq!(
        w.narrow(0, 5, 1).unwrap().to_vec::<f32>().unwrap(),
        vec![5.0]
    );
    assert_eq!(transfer::pending(), 0);
}

#[test]
fn non_blocking_from_pageable_memory_copies_before_returning() {
    stand_in::gpus(2, None).unwrap();
    let x = Tensor::ones([1000], Device::Cpu).unwrap();
    let y = x.to_non_blocking(&Device::Cuda(0)).unwrap();
    assert!(y.transfer_in_flight().is_none(), "nothing left to wait for");
    let t = y.last_transfer().unwrap();
    assert_eq!(
        (t.mode, t.memory),
        (CopyMode::NonBlockingFromPageable, HostMemoryKind::Pageable)
    );
    assert!(t.to_string().contains("pin_memory() first"), "{t}");
    assert_eq!(y.sum_all().unwrap().item::<f32>().unwrap(), 1000.0);
}

/// Simulated devices standing for a named GPU (`PLACELAB_SIMULATE_CUDA=2,h100`) have its memory
/// less a context's, and every copy shows, beside the host copy it measured, what the GPU would
/// take: pinned faster than pageable, NVLink between two of them. Unknown names are refused
/// with the list of known ones.
#[test]
fn devices_standing_for_an_h100_predict_each_copy_beside_the_measured_one() {
    // In a process of its own, set up as a user would: the setting is the whole process's.
    let name = "devices_standing_for_an_h100_predict_each_copy_beside_the_measured_one";
    let env = [
        ("PLACELAB_SIMULATE_CUDA", "2,h100"),
        ("PLACELAB_TEST_EMULATED", "0"),
    ];
    if !own_process::in_own_process(name, &env) {
        return;
    }
    let gpu = Device::Cuda(0);
    assert!(matches!(gpu.kind(), Ok(DeviceKind::SimulatedGpu { .. })));
    let (_, total) = cuda::mem_get_info(0).unwrap();
    assert_eq!(
        total,
        81_559 * (1 << 20) - (512 << 20),
        "an H100's memory less a context's"
    );
    assert!(
        cuda::device_name(0)
            .unwrap()
            .contains("standing for an H100 SXM")
    );
    let x = Tensor::zeros([16 << 20], Device::Cpu).unwrap(); // 64 MiB
    let pageable = x.to(&gpu).unwrap();
    let pinned = x.pin_memory().unwrap().to(&gpu).unwrap();
    let between = pageable.to(&Device::Cuda(1)).unwrap();
    let predicted = |t: &Tensor| t.last_transfer().unwrap().predicted.clone().unwrap();
    let (pg, pn, nv) = (
        predicted(&pageable),
        predicted(&pinned),
        predicted(&between),
    );
    assert_eq!(pn.gpu.with_article(), "an H100 SXM");
    assert_eq!(pn.link, "PCIe 5 ×16, pinned");
    assert_eq!(pg.link, "PCIe 5 ×16, pageable");
    assert!(nv.link.starts_with("NVLink"), "{nv:?}");
    assert!(
        pn.duration <= pg.duration,
        "pinned is never slower: {pn:?} {pg:?}"
    );
    assert!(nv.duration * 4 < pn.duration, "{nv:?} against {pn:?}");
    // 64 MiB at the fitted share of 63.0 GB/s, plus the fitted latency.
    let fitted = placelab::cost::FITTED;
    let expected = fitted.pinned_latency + (64 << 20) as f64 / (fitted.pcie_efficiency * 63.015e9);
    assert!(
        (pn.duration.as_secs_f64() - expected).abs() < 1e-6,
        "{pn:?}"
    );
    // Beside it, the nearest copy placelab measured on a real H100 (16 MiB and 256 MiB are as
    // near to 64 MiB: the smaller is taken), with the model's error there.
    let measured = pn.measured.clone().expect("an H100 run is kept");
    assert_eq!(
        (measured.bytes, measured.date.as_str()),
        (16 << 20, "2026-11-27")
    );
    assert!(measured.model_error.abs() < 0.25, "{measured:?}");
    assert!(nv.measured.is_none(), "no run on two GPUs is kept: {nv:?}");
    let shown = pinned.last_transfer().unwrap().to_string();
    assert!(
        shown.contains("simulated: host copy time")
            && shown.contains("≈ 1.22 ms on an H100 SXM (predicted: PCIe 5 ×16, pinned)")
            && shown.contains("; placelab measured ")
            && shown.contains(" for 16.00 MiB there on 2026-11-27 (the model: "),
        "{shown}"
    );
    // The CPU's own copies predict nothing.
    assert!(x.to(&Device::Cpu).unwrap().last_transfer().is_none());
    let e = cuda::simulate_as(1, "h800").unwrap_err().to_string();
    assert!(
        e.contains("no GPU named \"h800\"") && e.contains("h100, h100-pcie, h200"),
        "{e}"
    );
}

/// The tests above, again on emulated devices: the CUDA backend and `kernels/*.cu` do the work.
#[test]
fn every_test_again_on_emulated_devices() {
    stand_in::rerun_emulated("every_test_again_on_emulated_devices");
}
