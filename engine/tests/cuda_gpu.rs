//! On a real GPU, or on emulated devices where there is none: every PyTorch reference case, the
//! kernels against the CPU backend on large random inputs (multi-block reductions, strided
//! views, every cast), GEMMs in each dtype (cuBLAS on a GPU, the CPU's GEMM when emulated), and
//! timed transfers. `benches/gpu-check.sh` runs it on a GPU machine.

#[path = "support/gpu.rs"]
mod gpu;
#[path = "support/torch_cases.rs"]
mod torch_cases;

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
