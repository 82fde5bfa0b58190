//! On a real GPU, or on emulated devices where there is none: every PyTorch reference case, the
//! kernels against the CPU backend on large random inputs (multi-block reductions, strided
//! views, every cast), GEMMs in each dtype (cuBLAS on a GPU, the CPU's GEMM when emulated), and
//! timed transfers. `benches/gpu-check.sh` runs it on a GPU machine.

#[path = "support/gpu.rs"]
mod gpu;
#[path = "support/torch_cases.rs"]
mod torch_cases;

use placelab::cuda::{Event, Stream, with_stream};
use placelab::prelude::*;
use placelab::transfer::{CopyMode, HostMemoryKind};

const GPU: Device = Device::Cuda(0);

/// ‖got − want‖ / ‖want‖ over all elements, in f64; NaN anywhere fails.
fn rel_err(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape());
    let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    assert!(g.iter().all(|v| !v.is_nan()), "NaN in the GPU result");
    // Equal values (infinities included) differ by nothing.
    let diff = |a: &f64, b: &f64| if a == b { 0.0 } else { (a - b) * (a - b) };
    let num: f64 = g.iter().zip(&w).map(|(a, b)| diff(a, b)).sum();
    let den: f64 = w.iter().map(|b| b * b).sum();
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// Runs `f` on the CPU and on the GPU with the same inputs and checks the relative error.
fn check(name: &str, tol: f64, inputs: &[&Tensor], f: impl Fn(&[Tensor]) -> Result<Tensor>) {
    let cpu: Vec<Tensor> = inputs.iter().map(|t| t.to(&Device::Cpu).unwrap()).collect();
    let gpu: Vec<Tensor> = inputs.iter().map(|t| t.to(&GPU).unwrap()).collect();
    let want = f(&cpu).unwrap_or_else(|e| panic!("{name} on cpu: {e}"));
    let got = f(&gpu).unwrap_or_else(|e| panic!("{name} on {GPU}: {e}"));
    assert_eq!(got.device(), GPU, "{name}");
    assert_eq!(got.dtype(), want.dtype(), "{name}");
    let err = rel_err(&got, &want);
    assert!(err <= tol, "{name}: relative error {err:.3e} > {tol:.0e}");
    // Run twice: a result that changes between runs is a race.
    let again = f(&gpu).unwrap();
    assert_eq!(
        again.to_f64_vec().unwrap(),
        got.to_f64_vec().unwrap(),
        "{name} is not deterministic"
    );
}

#[test]
fn every_pytorch_reference_case_matches_on_the_gpu() {
    let _serial = gpu::serial();
    torch_cases::replay(&GPU);
}

#[test]
fn kernels_match_the_cpu_on_large_random_inputs() {
    let _serial = gpu::serial();
    manual_seed(7);
    let x = Tensor::randn([1000, 1000], Device::Cpu).unwrap();
    let y = Tensor::randn([1000, 1000], Device::Cpu).unwrap();
    let row = Tensor::randn([1000], Device::Cpu).unwrap();
    let long = Tensor::randn([10_000_000], Device::Cpu).unwrap();
    for (dtype, tol) in [
        (DType::F32, 1e-6),
        (DType::F64, 1e-12),
        (DType::F16, 1e-3),
        (DType::BF16, 8e-3),
    ] {
        let (x, y, row) = (
            x.to_dtype(dtype).unwrap(),
            y.to_dtype(dtype).unwrap(),
            row.to_dtype(dtype).unwrap(),
        );
        let name = |op: &str| format!("{op} {dtype}");
        check(&name("add broadcast"), tol, &[&x, &row], |t| &t[0] + &t[1]);
        check(&name("mul transposed"), tol, &[&x, &y], |t| {
            &t[0] * &t[1].t()?
        });
        check(&name("div"), tol, &[&x, &y], |t| {
            t[0].div(&t[1].abs()?.add(1.0)?)
        });
        check(&name("pow"), 1e2 * tol, &[&x], |t| t[0].abs()?.pow(1.5));
        check(&name("maximum"), tol, &[&x, &y], |t| t[0].maximum(&t[1]));
        check(&name("exp"), 1e2 * tol, &[&x], |t| t[0].exp());
        check(&name("log"), 1e2 * tol, &[&x], |t| {
            t[0].abs()?.add(0.5)?.log()
        });
        check(&name("sqrt"), tol, &[&x], |t| t[0].abs()?.sqrt());
        check(&name("sigmoid"), 1e2 * tol, &[&x], |t| t[0].sigmoid());
        check(&name("tanh"), 1e2 * tol, &[&x], |t| t[0].tanh());
        check(&name("gelu"), 1e2 * tol, &[&x], |t| t[0].gelu());
        check(&name("relu"), tol, &[&x], |t| t[0].relu());
        check(&name("clamp"), tol, &[&x], |t| {
            t[0].clamp(Some(-0.5), Some(0.5))
        });
        check(&name("where"), tol, &[&x, &y], |t| {
            Tensor::where_cond(&t[0].gt(&t[1])?, &t[0], &t[1])
        });
        check(&name("lt"), 0.0, &[&x, &y], |t| t[0].lt(&t[1]));
        check(&name("sum rows"), 1e2 * tol, &[&x], |t| t[0].sum(1, false));
        check(&name("sum cols"), 1e2 * tol, &[&x], |t| t[0].sum(0, true));
        check(&name("mean"), 1e2 * tol, &[&x], |t| t[0].mean_all());
        check(&name("max"), 0.0, &[&x], |t| t[0].max(1, false));
        check(&name("argmin"), 0.0, &[&x], |t| t[0].argmin(0, false));
        check(&name("softmax"), 1e2 * tol, &[&x], |t| t[0].softmax(1));
        check(&name("log_softmax"), 1e2 * tol, &[&x], |t| {
            t[0].log_softmax(0)
        });
        check(&name("cat"), 0.0, &[&x, &y], |t| {
            Tensor::cat(&[&t[0], &t[1].t()?], 1)
        });
        check(&name("permute contiguous"), 0.0, &[&x], |t| {
            t[0].reshape([10, 100, 1000])?
                .permute([2, 0, 1])?
                .contiguous()
        });
        check(&name("narrow"), 0.0, &[&x], |t| {
            t[0].narrow(1, 3, 500)?.contiguous()
        });
        let idx = Tensor::from_vec(vec![5i64, 0, 999, 5], [4], Device::Cpu).unwrap();
        check(&name("index_select"), 0.0, &[&x, &idx], |t| {
            t[0].index_select(0, &t[1])
        });
    }
    // Every cast, from each dtype to each other, exactly as the CPU does it.
    let src = (&x * 300.0).unwrap();
    for from in DType::ALL {
        let s = src.to_dtype(from).unwrap();
        for to in DType::ALL {
            check(&format!("cast {from}→{to}"), 0.0, &[&s], |t| {
                t[0].to_dtype(to)
            });
        }
    }
    // f64 values that f32 cannot hold round through f32 to f16/bf16, on both devices.
    let thirds = (&x.to_dtype(DType::F64).unwrap() / 3.0).unwrap();
    for to in [DType::F16, DType::BF16] {
        check(&format!("cast f64/3→{to}"), 0.0, &[&thirds], |t| {
            t[0].to_dtype(to)
        });
        // A Rust number beside a half-precision tensor is not rounded to it first (the
        // binary_number/compare_number kernels take it as f32), on either side of the op.
        check(&format!("{to} + small number"), 0.0, &[&x], |t| {
            t[0].to_dtype(to)?.add(0.000_488_4)
        });
        check(&format!("number - {to}"), 0.0, &[&x], |t| {
            t[0].to_dtype(to)?.rsub(1.000_3)
        });
        check(&format!("number / {to} view"), 0.0, &[&x], |t| {
            t[0].to_dtype(to)?.t()?.rdiv(0.3)
        });
        // CUDA's `powf` is not correctly rounded (nor is the C library's an emulated device
        // uses): a few of the million results may be one ulp of f16/bf16 apart, which moves
        // this norm by about 1e-6.
        check(&format!("{to} ^ number"), 1e-5, &[&x], |t| {
            t[0].to_dtype(to)?.abs()?.pow(1.37)
        });
        check(&format!("{to} > number"), 0.0, &[&x], |t| {
            t[0].to_dtype(to)?.gt(0.000_1)
        });
        // Autograd through the number kernel: the number becomes a tensor only for backward.
        check(
            &format!("grad of (number - {to}) * number"),
            0.0,
            &[&x],
            |t| {
                let leaf = t[0].to_dtype(to)?.requires_grad_(true)?;
                leaf.rsub(0.7)?.mul(0.3)?.sum_all()?.backward()?;
                Ok(leaf.grad().expect("the leaf has a gradient"))
            },
        );
    }
    // More rows than a grid has blocks (65,536 on a GPU, 1,024 emulated): blocks walk several
    // rows. Emulated, a row costs its 256 threads' ten barriers in fiber switches: 70,000 rows
    // were most of the 165 CPU-s this binary took in a `.ci/test` lane (2026-12-03).
    let rows = if gpu::real() {
        200_000
    } else {
        placelab::gpu::emulated::MAX_GRID_BLOCKS * 3 + 7
    };
    let many = Tensor::randn([rows, 3], Device::Cpu).unwrap();
    check("sum many rows", 1e-6, &[&many], |t| t[0].sum(1, false));
    check("max many rows", 0.0, &[&many], |t| t[0].max(1, false));
    check("argmax many rows", 0.0, &[&many], |t| t[0].argmax(1, false));
    check("softmax many rows", 1e-6, &[&many], |t| t[0].softmax(1));
    // One long row: the reduction is split across many blocks.
    check("sum 10M", 1e-6, &[&long], |t| t[0].sum_all());
    check("argmax 10M", 0.0, &[&long], |t| t[0].argmax_all());
    check("softmax 10M", 1e-6, &[&long], |t| t[0].softmax(0));
    check("log_softmax 10M", 1e-6, &[&long], |t| t[0].log_softmax(0));
    check("integer arithmetic", 0.0, &[&x], |t| {
        let i = (&t[0] * 1000.0)?.to_dtype(DType::I64)?;
        (&(&i * &i)? - &i)?.sum(1, false)
    });
}

#[test]
fn cublas_matmul_in_every_float_dtype() {
    let _serial = gpu::serial();
    manual_seed(11);
    let a = Tensor::randn([512, 384], Device::Cpu).unwrap();
    let b = Tensor::randn([384, 256], Device::Cpu).unwrap();
    let batch = Tensor::randn([4, 3, 64, 32], Device::Cpu).unwrap();
    let w = Tensor::randn([32, 48], Device::Cpu).unwrap();
    for (dtype, tol) in [
        (DType::F32, 1e-5),
        (DType::F64, 1e-12),
        (DType::F16, 1e-2),
        (DType::BF16, 1e-2),
    ] {
        let (a, b) = (a.to_dtype(dtype).unwrap(), b.to_dtype(dtype).unwrap());
        check(&format!("matmul {dtype}"), tol, &[&a, &b], |t| {
            t[0].matmul(&t[1])
        });
        check(&format!("matmul transposed {dtype}"), tol, &[&b, &a], |t| {
            t[0].t()?.matmul(&t[1].t()?)
        });
        let (batch, w) = (batch.to_dtype(dtype).unwrap(), w.to_dtype(dtype).unwrap());
        check(
            &format!("batched broadcast matmul {dtype}"),
            tol,
            &[&batch, &w],
            |t| t[0].matmul(&t[1]),
        );
        check(&format!("matrix · vector {dtype}"), tol, &[&a, &b], |t| {
            t[0].matmul(&t[1].narrow(1, 0, 1)?.squeeze(1)?)
        });
        // cuBLAS with β = 1 adding the product onto a broadcast bias row (a Linear's forward).
        let bias = b.narrow(0, 0, 1).unwrap().squeeze(0).unwrap();
        check(&format!("addmm {dtype}"), tol, &[&bias, &a, &b], |t| {
            t[0].addmm(&t[1], &t[2])
        });
    }
    cuda::set_allow_tf32(true);
    check("matmul tf32", 3e-3, &[&a, &b], |t| t[0].matmul(&t[1]));
    cuda::set_allow_tf32(false);
    let i = Tensor::ones([2, 2], (DType::I64, GPU)).unwrap();
    let err = i.matmul(&i).unwrap_err().to_string();
    assert!(
        err.contains("matmul is not supported for dtype i64"),
        "{err}"
    );
}

#[test]
fn transfers_are_exact_and_timed_with_cuda_events() {
    let _serial = gpu::serial();
    for dtype in DType::ALL {
        let x = Tensor::arange(0.0, 1000.0, Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        let back = x.to(&GPU).unwrap().cpu().unwrap();
        assert_eq!(
            back.to_f64_vec().unwrap(),
            x.to_f64_vec().unwrap(),
            "{dtype}"
        );
    }
    let x = Tensor::randn([1024, 1024], Device::Cpu).unwrap();
    let y = x.to(&GPU).unwrap();
    let t = y.last_transfer().unwrap();
    assert_eq!(
        (t.clock, t.memory, t.bytes),
        (gpu::clock(), HostMemoryKind::Pageable, 4 << 20)
    );
    assert!(
        t.duration > std::time::Duration::ZERO && t.wall >= t.duration / 2,
        "{t:?}"
    );
    let pinned = x.pin_memory().unwrap();
    assert!(pinned.is_pinned() && cuda::pinned_bytes() >= 4 << 20);
    let z = pinned.to(&GPU).unwrap();
    assert_eq!(z.last_transfer().unwrap().memory, HostMemoryKind::Pinned);
    assert_eq!(
        z.cpu().unwrap().to_vec::<f32>().unwrap(),
        x.to_vec::<f32>().unwrap()
    );
    // The context was created before the first copy and reported apart from it, once.
    assert!(cuda::context_setup_time(0).is_some());
    let later = x.to(&GPU).unwrap();
    assert!(later.last_transfer().unwrap().context_setup.is_none());
    if cuda::device_count() > 1 {
        let other = y.to(&Device::Cuda(1)).unwrap();
        assert_eq!(other.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    }
    let err = (&x + &y).unwrap_err().to_string();
    assert!(err.contains("device mismatch in add"), "{err}");
}

#[test]
fn non_blocking_copies_overlap_on_the_gpu() {
    let _serial = gpu::serial();
    // 256 MiB: tens of milliseconds over PCIe, so returning early is plain to see (64 MiB on
    // emulated devices, whose copies run at memory speed and kernels at CPU speed).
    let n = if gpu::real() { 64 << 20 } else { 16 << 20 };
    let x = Tensor::randn([n], Device::Cpu).unwrap();
    let pinned = x.pin_memory().unwrap();
    // The call's own work (the output block) comes from the cache, not a new cuMemAlloc, so the
    // call's time is the queueing alone.
    drop(Tensor::zeros([n], GPU).unwrap());
    let y = pinned.to_non_blocking(&GPU).unwrap();
    // Queued behind the copy on the same stream: a kernel reads the copied values.
    let doubled = (&y * 2.0).unwrap();
    drop(pinned); // waits for the copy engine to finish reading it
    cuda::synchronize(0).unwrap();
    let t = y.last_transfer().unwrap();
    assert_eq!(
        (t.mode, t.memory, t.clock),
        (CopyMode::NonBlocking, HostMemoryKind::Pinned, gpu::clock())
    );
    assert!(
        t.wall > std::time::Duration::ZERO && t.duration > std::time::Duration::ZERO,
        "the call's time and the copy's both measured: {t:?}"
    );
    if gpu::real() {
        // The copy engine does the work and the call only queues it: microseconds against the
        // tens of milliseconds 256 MiB takes over PCIe, a margin no busy host eats.
        assert!(
            t.wall < t.duration / 4,
            "the call returned in {:?}, the copy ran {:?}",
            t.wall,
            t.duration
        );
    }
    // On emulated devices the stream's thread copies at memory speed on the cores the caller
    // competes for: which ends first is the scheduler's choice on a loaded 2-core machine, so
    // what is checked there is the order on the stream (the kernel below reads the copy).
    let back = doubled.to_non_blocking(&Device::Cpu).unwrap();
    assert!(back.is_pinned());
    // Read at once: the engine waits for the copy rather than showing a half-filled buffer.
    let want: Vec<f32> = x.to_vec::<f32>().unwrap().iter().map(|v| v * 2.0).collect();
    assert_eq!(back.to_vec::<f32>().unwrap(), want);
    let pageable = x.to_non_blocking(&GPU).unwrap();
    assert_eq!(
        pageable.last_transfer().unwrap().mode,
        CopyMode::NonBlockingFromPageable
    );
    if cuda::device_count() > 1 {
        let other = y.to_non_blocking(&Device::Cuda(1)).unwrap();
        let sum = other.sum_all().unwrap().item::<f32>().unwrap();
        let want = y.sum_all().unwrap().item::<f32>().unwrap();
        assert_eq!(sum, want, "cuda:1's stream waited for the peer copy");
    }
}

#[test]
fn a_training_step_on_the_gpu_matches_the_cpu() {
    let _serial = gpu::serial();
    let step = |device: &Device| -> Vec<f64> {
        manual_seed(3);
        let mut model = nn::Sequential::new()
            .add(nn::Linear::new(64, 32, Device::Cpu).unwrap())
            .add(nn::ReLU)
            .add(nn::Linear::new(32, 10, Device::Cpu).unwrap());
        model.to(device).unwrap();
        let x = Tensor::randn([16, 64], Device::Cpu)
            .unwrap()
            .to(device)
            .unwrap();
        let target = Tensor::randint(0, 10, [16], Device::Cpu)
            .unwrap()
            .to(device)
            .unwrap();
        let mut opt = Sgd::new(model.parameters(), 0.1).unwrap();
        let criterion = nn::CrossEntropyLoss::new();
        let mut losses = Vec::new();
        for _ in 0..5 {
            let loss = criterion
                .forward(&model.forward(&x).unwrap(), &target)
                .unwrap();
            opt.zero_grad();
            loss.backward().unwrap();
            opt.step().unwrap();
            losses.push(loss.item_f64().unwrap());
        }
        losses
    };
    let (cpu, gpu) = (step(&Device::Cpu), step(&GPU));
    for (c, g) in cpu.iter().zip(&gpu) {
        assert!(
            (c - g).abs() <= 1e-4 * c.abs(),
            "cpu {cpu:?} vs gpu {gpu:?}"
        );
    }
}

/// A wrong index in a kernel that checks its indices as it runs (`nll_loss`'s classes,
/// `index_select`'s entries) is written into page-locked host memory by the GPU itself and
/// reported at the host's next wait, naming the index as on the CPU; the next op is right.
#[test]
fn a_wrong_index_is_reported_by_the_gpu_at_the_next_wait() {
    let _serial = gpu::serial();
    let scores = Tensor::randn([4, 3], GPU).unwrap();
    let good = Tensor::from_vec(vec![0i64, 2, 1, 2], [4], GPU).unwrap();
    let bad = Tensor::from_vec(vec![0i64, 3, 1, 2], [4], GPU).unwrap();
    let criterion = nn::CrossEntropyLoss::new();
    let loss = criterion.forward(&scores, &bad).unwrap();
    let text = match loss.item::<f32>() {
        Err(e @ Error::FoundOnDevice { .. }) => e.to_string(),
        other => panic!("a wrong class read back as {other:?}"),
    };
    assert!(
        text.contains("index 3 out of range in nll_loss: dimension 1 has size 3"),
        "{text}"
    );
    let want = (criterion.forward(&scores.cpu().unwrap(), &good.cpu().unwrap()))
        .unwrap()
        .item::<f32>()
        .unwrap();
    let got = criterion.forward(&scores, &good).unwrap();
    assert!((got.item::<f32>().unwrap() - want).abs() < 1e-5);
    let rows = Tensor::randn([8, 256], GPU).unwrap();
    let entries = Tensor::from_vec(vec![1i64, 9, 2], [3], GPU).unwrap();
    let picked = rows.index_select(0, &entries).unwrap();
    let text = match cuda::synchronize(0) {
        Err(e @ Error::FoundOnDevice { .. }) => e.to_string(),
        other => panic!("a wrong entry synchronized as {other:?}"),
    };
    assert!(
        text.contains("index 9 out of range in index_select"),
        "{text}"
    );
    drop(picked);
    let fine = Tensor::from_vec(vec![1i64, 7], [2], GPU).unwrap();
    let want = rows
        .cpu()
        .unwrap()
        .index_select(0, &fine.cpu().unwrap())
        .unwrap();
    let got = rows.index_select(0, &fine).unwrap();
    assert_eq!(got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
}

/// Work that keeps `stream` busy for a while, so that what is queued behind it waits: on a GPU
/// an 8192² f32 GEMM queued on it (tens of milliseconds), on an emulated device a hold until
/// the returned guard is dropped.
fn keep_busy(stream: &Stream) -> Box<dyn std::any::Any> {
    if gpu::real() {
        with_stream(stream, || {
            let g = Tensor::randn([8192, 8192], GPU).unwrap();
            Box::new(g.matmul(&g).unwrap()) as Box<dyn std::any::Any>
        })
    } else {
        Box::new(stream.hold().unwrap())
    }
}

/// The two rules of work on two streams, on real hardware: a stream that reads what another
/// writes waits for it (`wait_stream`), and a block another stream reads is not handed out
/// again before that stream is done with it (`record_stream`). Each write comes behind long
/// work, so that breaking either rule would read the wrong values.
#[test]
fn wait_stream_and_record_stream_keep_two_streams_right() {
    let _serial = gpu::serial();
    const N: usize = 1 << 20;
    let (producer, consumer) = (Stream::new(&GPU).unwrap(), Stream::new(&GPU).unwrap());
    let all = |t: &Tensor, v: f32| t.to_vec::<f32>().unwrap().iter().all(|&x| x == v);
    let (a, ones) = with_stream(&producer, || {
        (
            Tensor::zeros(N, GPU).unwrap(),
            Tensor::ones(N, GPU).unwrap(),
        )
    });
    producer.synchronize().unwrap();
    let busy = keep_busy(&producer);
    with_stream(&producer, || a.assign_(&ones)).unwrap(); // behind the long work
    let b = with_stream(&consumer, || {
        consumer.wait_stream(&producer)?;
        a.mul(2.0)
    })
    .unwrap();
    drop(busy);
    consumer.synchronize().unwrap();
    assert!(
        all(&b, 2.0),
        "the consumer read a before the producer wrote it"
    );

    let x = with_stream(&producer, || Tensor::full(N, 3.0, GPU).unwrap());
    producer.synchronize().unwrap();
    let busy = keep_busy(&consumer);
    let y = with_stream(&consumer, || x.mul(2.0)).unwrap(); // reads x behind the long work
    x.record_stream(&consumer).unwrap();
    drop(x);
    // Without the rule z would take x's block from the producer's pool and write 7s there.
    let z = with_stream(&producer, || Tensor::full(N, 7.0, GPU).unwrap());
    producer.synchronize().unwrap();
    drop(busy);
    consumer.synchronize().unwrap();
    assert!(all(&y, 6.0), "the consumer read a block handed out again");
    assert!(all(&z, 7.0));
}

/// The lesson's claim on real hardware: an upload from pinned memory on a side stream runs on a
/// copy engine while the default stream's GEMM runs, and the profile's lanes show it (the share
/// of the copy's time hidden behind compute). Events time the copy on its stream.
#[test]
fn a_pinned_upload_on_a_side_stream_runs_beside_a_gemm() {
    let _serial = gpu::serial();
    // On a GPU: 256 MiB (about 5 ms over PCIe 5) beside an 8192² GEMM (tens of milliseconds).
    let (elements, n) = if gpu::real() {
        (64 << 20, 8192)
    } else {
        (1 << 20, 256)
    };
    let side = Stream::new(&GPU).unwrap();
    let host = Tensor::randn([elements], Device::Cpu).unwrap();
    let pinned = host.pin_memory().unwrap();
    let a = Tensor::randn([n, n], GPU).unwrap();
    // Warm: cuBLAS's handle made, each stream's blocks cached.
    drop(a.matmul(&a).unwrap());
    drop(with_stream(&side, || pinned.to_non_blocking(&GPU)).unwrap());
    cuda::synchronize(0).unwrap();
    let (start, end) = (Event::new(), Event::new());
    let mut uploaded = None;
    let p = profile(|| {
        let up = with_stream(&side, || {
            start.record(&side)?;
            let up = pinned.to_non_blocking(&GPU)?;
            end.record(&side)?;
            Ok::<_, Error>(up)
        })?;
        let c = a.matmul(&a)?;
        cuda::synchronize(0)?;
        uploaded = Some(up);
        Ok(c)
    });
    assert_eq!(p.failure(), None);
    let up = uploaded.expect("the profiled code ran");
    assert_eq!(up.to_vec::<f32>().unwrap(), host.to_vec::<f32>().unwrap());
    let copy_ms = start.elapsed_time(&end).unwrap();
    assert!(copy_ms > 0.0, "the copy's events: {copy_ms} ms");
    let hidden = p.copies_hidden().expect("the copy was timed on its stream");
    println!(
        "{} MiB in {copy_ms:.3} ms ({:.1} GB/s) on stream {}; {:.0}% of it hidden behind the GEMM\n{}",
        (elements * 4) >> 20,
        (elements * 4) as f64 / (copy_ms as f64 * 1e6),
        side.id(),
        hidden * 100.0,
        p.lanes_text()
    );
    if gpu::real() {
        // The GEMM is several times longer than the copy and starts with it: nearly all of the
        // copy runs beside it. Half is a margin no launch delay eats.
        assert!(hidden > 0.5, "{:.0}% hidden", hidden * 100.0);
    }
}
