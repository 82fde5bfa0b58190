//! GPU benchmark (needs a real NVIDIA GPU; `benches/gpu-check.sh` runs it beside
//! `torch_gpu.py`, which measures the same workloads with PyTorch). Prints one JSON object per
//! line: host↔device bandwidth, pageable and pinned, from 4 KiB to 1 GiB (CUDA-event time and
//! the wall time the caller waited), a non-blocking upload (the call's time against the copy's),
//! with two GPUs a copy between them peer to peer against one staged through pinned host memory,
//! a few kernels and GEMMs timed with a synchronize, whole SGD steps and pinned-memory workloads
//! (per call, synchronised once after many), a copy beside a GEMM on one stream and on two
//! (`gpu_overlap.rs`), and notebook 04's training step profiled op by op
//! (CUDA events). Where the GPU is in placelab's table
//! (`placelab::cost`), each line also carries the cost model's prediction (`predicted_ms`), so
//! `gpu-check.sh` can report the model's error on this machine.

mod gpu_overlap;

use std::sync::OnceLock;
use std::time::Instant;

use placelab::cost::{self, CopyRoute, GpuSpec};
use placelab::prelude::*;

const GPU: Device = Device::Cuda(0);

/// This GPU's entry in the cost model's table, if it has one.
fn spec() -> Option<&'static GpuSpec> {
    static SPEC: OnceLock<Option<&'static GpuSpec>> = OnceLock::new();
    *SPEC.get_or_init(|| cost::for_device_name(&cuda::device_name(0).ok()?))
}

/// `,"predicted_ms":X` when the model knows this GPU, else nothing.
fn predicted(ms: impl FnOnce(&GpuSpec) -> f64) -> String {
    spec().map_or(String::new(), |g| format!(",\"predicted_ms\":{:.5}", ms(g)))
}

/// The model's time for a copy of `bytes` along `route`, in ms.
fn copy_ms(g: &GpuSpec, route: CopyRoute, bytes: usize) -> f64 {
    cost::copy(g, route, bytes as u64).seconds * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn reps(bytes: usize) -> usize {
    if bytes >= 256 << 20 {
        5
    } else if bytes >= 16 << 20 {
        15
    } else {
        50
    }
}

fn transfers() -> Result<()> {
    for shift in [12, 16, 20, 24, 28, 30] {
        let bytes = 1usize << shift;
        let x = Tensor::zeros([bytes / 4], Device::Cpu)?;
        let pinned = x.pin_memory()?;
        let on_gpu = x.to(&GPU)?;
        let cases: [(&str, &dyn Fn() -> Result<Tensor>); 4] = [
            ("h2d_pageable", &|| x.to(&GPU)),
            ("h2d_pinned", &|| pinned.to(&GPU)),
            ("d2h_pageable", &|| on_gpu.cpu()),
            ("d2h_pinned", &|| on_gpu.cpu_pinned()),
        ];
        for (kind, run) in cases {
            let _warm_up = run()?; // first-touch of the cache's blocks
            let (mut event, mut wall) = (Vec::new(), Vec::new());
            for _ in 0..reps(bytes) {
                let t = run()?;
                let tr = t.last_transfer().expect("a transfer");
                event.push(tr.duration.as_secs_f64() * 1e3);
                wall.push(tr.wall.as_secs_f64() * 1e3);
            }
            let (e, w) = (median(event), median(wall));
            let route = CopyRoute::host(kind.ends_with("pinned"), kind.starts_with("h2d"));
            println!(
                "{{\"bench\":\"transfer\",\"kind\":\"{kind}\",\"bytes\":{bytes},\"event_ms\":{e:.5},\"wall_ms\":{w:.5},\"event_gbps\":{:.3},\"wall_gbps\":{:.3}{}}}",
                bytes as f64 / e / 1e6,
                bytes as f64 / w / 1e6,
                predicted(|g| copy_ms(g, route, bytes))
            );
        }
    }
    Ok(())
}

/// A non-blocking upload from pinned memory: how long the call took to return, against how long
/// the copy ran (events), after an explicit synchronize.
fn non_blocking() -> Result<()> {
    for shift in [20, 26, 28] {
        let bytes = 1usize << shift;
        let pinned = Tensor::zeros([bytes / 4], Device::Cpu)?.pin_memory()?;
        let (mut call, mut event) = (Vec::new(), Vec::new());
        for i in 0..reps(bytes) + 1 {
            let y = pinned.to_non_blocking(&GPU)?;
            cuda::synchronize(0)?;
            let tr = y.last_transfer().expect("a transfer");
            if i > 0 {
                call.push(tr.wall.as_secs_f64() * 1e3);
                event.push(tr.duration.as_secs_f64() * 1e3);
            }
        }
        println!(
            "{{\"bench\":\"non_blocking\",\"kind\":\"h2d_pinned\",\"bytes\":{bytes},\"call_ms\":{:.5},\"event_ms\":{:.5}}}",
            median(call),
            median(event)
        );
    }
    Ok(())
}

/// `cuda:0 → cuda:1` directly (peer to peer once peer access is enabled; the transfer says which
/// route it took) against the same bytes staged through pinned host memory by hand, the route a
/// copy takes without peer access.
fn peer() -> Result<()> {
    let other = Device::Cuda(1);
    for shift in [20, 24, 28, 30] {
        let bytes = 1usize << shift;
        let x = Tensor::zeros([bytes / 4], GPU)?;
        let staged = || -> Result<(f64, f64)> {
            let t = Instant::now();
            let host = x.cpu_pinned()?;
            let y = host.to(&other)?;
            let events = [host.last_transfer(), y.last_transfer()]
                .iter()
                .map(|tr| tr.expect("a transfer").duration.as_secs_f64())
                .sum::<f64>();
            Ok((events * 1e3, t.elapsed().as_secs_f64() * 1e3))
        };
        let direct = || -> Result<(f64, f64, String)> {
            let y = x.to(&other)?;
            let tr = y.last_transfer().expect("a transfer");
            let route = format!("{:?}", tr.between_gpus.expect("a copy between GPUs"));
            Ok((
                tr.duration.as_secs_f64() * 1e3,
                tr.wall.as_secs_f64() * 1e3,
                route,
            ))
        };
        let (_, _, route) = direct()?; // enables peer access, warms the caches
        staged()?;
        let (mut de, mut dw, mut se, mut sw) = (vec![], vec![], vec![], vec![]);
        for _ in 0..reps(bytes) {
            let (e, w, _) = direct()?;
            de.push(e);
            dw.push(w);
            let (e, w) = staged()?;
            se.push(e);
            sw.push(w);
        }
        let gbps = |ms: f64| bytes as f64 / ms / 1e6;
        let (de, dw, se, sw) = (median(de), median(dw), median(se), median(sw));
        println!(
            "{{\"bench\":\"peer\",\"kind\":\"d2d\",\"bytes\":{bytes},\"route\":\"{route}\",\"direct_event_gbps\":{:.3},\"direct_wall_gbps\":{:.3},\"staged_event_gbps\":{:.3},\"staged_wall_gbps\":{:.3},\"event_ms\":{de:.5}{}}}",
            gbps(de),
            gbps(dw),
            gbps(se),
            gbps(sw),
            predicted(|g| copy_ms(g, CopyRoute::BetweenGpus, bytes))
        );
    }
    Ok(())
}

/// What the model predicts for the op row `name`, in ms: the pricing `engine/src/cost/rows.rs` gives
/// the same row when the model is fitted and checked (`None` for a row it does not price).
fn op_ms(g: &GpuSpec, name: &str) -> Option<f64> {
    let row = cost::measured::Row {
        bench: "op".into(),
        name: name.into(),
        bytes: 0,
        calls: 1,
        seconds: 0.0,
        torch_seconds: None,
        wall_seconds: None,
    };
    let priced = cost::rows::price(&row, &[])?;
    Some(priced.seconds(&cost::FITTED, g) * 1e3)
}

/// Times `run` (the op row `name`, `flops` of arithmetic) with a synchronize after each call.
fn timed(name: &str, flops: f64, run: impl Fn() -> Result<Tensor>) -> Result<()> {
    for _ in 0..3 {
        let _warm_up = run()?;
    }
    cuda::synchronize(0)?;
    let mut ms = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let out = run()?;
        cuda::synchronize(0)?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        drop(out);
    }
    let m = median(ms);
    println!(
        "{{\"bench\":\"op\",\"name\":\"{name}\",\"ms\":{m:.5},\"tflops\":{:.3}{}}}",
        flops / m / 1e9,
        spec()
            .and_then(|g| op_ms(g, name))
            .map_or(String::new(), |ms| format!(",\"predicted_ms\":{ms:.5}"))
    );
    Ok(())
}

fn ops() -> Result<()> {
    // What each row reads and writes, as the model prices it: `engine/src/cost/rows.rs`.
    let a = Tensor::randn([10_000_000], GPU)?;
    let b = Tensor::randn([10_000_000], GPU)?;
    timed("add 10M f32", 0.0, || &a + &b)?;
    timed("exp 10M f32", 0.0, || a.exp())?;
    timed("sum 10M f32", 0.0, || a.sum_all())?;
    timed("softmax 1x10M f32", 0.0, || a.softmax(0))?;
    // Drawn on the GPU (Philox and a ziggurat, `kernels/random.cu`); PyTorch's is Philox and
    // Box-Muller.
    timed("randn 10M f32", 0.0, || Tensor::randn([10_000_000], GPU))?;
    let s = Tensor::randn([4096, 4096], GPU)?;
    timed("softmax 4096x4096 f32", 0.0, || s.softmax(1))?;
    let rows: Vec<i64> = (0..1000).map(|i| (i * 7919) % 4096).collect();
    let rows = Tensor::from_vec(rows, [1000], GPU)?;
    timed("index_select 1000 of 4096 rows f32", 0.0, || {
        s.index_select(0, &rows)
    })?;
    timed("transpose contiguous 4096x4096 f32", 0.0, || {
        s.t()?.contiguous()
    })?;
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let n = 4096usize;
        let m = Tensor::randn([n, n], GPU)?.to_dtype(dtype)?;
        timed(
            &format!("matmul {n}^3 {dtype}"),
            2.0 * (n as f64).powi(3),
            || m.matmul(&m),
        )?;
    }
    // Where a matmul's time goes (issue 40, item 4): its host time and the GPU time between the
    // CUDA events around it, for one warm bf16 and one f32 call; the log shows both.
    for dtype in [DType::BF16, DType::F32] {
        let m = Tensor::randn([4096, 4096], GPU)?.to_dtype(dtype)?;
        drop(m.matmul(&m)?);
        cuda::synchronize(0)?;
        let p = placelab::profile::profile(|| m.matmul(&m));
        eprintln!("matmul 4096^3 {dtype}, profiled:\n{}", p.text());
    }
    // The same GEMMs queued 20 at a time and synchronised once: the kernel's own time per call,
    // without a wait after each (beside the rows above, what one wait adds).
    for dtype in [DType::BF16, DType::F32] {
        let m = Tensor::randn([4096, 4096], GPU)?.to_dtype(dtype)?;
        let ms = per_call_ms(20, || m.matmul(&m).map(drop))?;
        print_op(&format!("matmul 4096^3 {dtype}, 20 queued"), ms);
    }
    cuda::set_allow_tf32(true);
    let m = Tensor::randn([4096, 4096], GPU)?;
    timed("matmul 4096^3 f32 tf32", 2.0 * 4096f64.powi(3), || {
        m.matmul(&m)
    })?;
    // The whole steps after this measure f32 as f32, as the shared H200 run did.
    cuda::set_allow_tf32(false);
    Ok(())
}

/// One SGD step of notebook 04's 784-128-10 MLP at batch 64 and 1024, and of the shared H200
/// run's 1024-4096-4096-10 MLP at batch 1024, profiled with every op priced as this GPU: each
/// row's time between CUDA events against the model's.
fn profiled_steps() -> Result<()> {
    use placelab::nn::{CrossEntropyLoss, Linear, ReLU, Sequential};
    let Some(gpu) = spec() else {
        return Ok(());
    };
    let steps: [(&str, &[usize], usize); 3] = [
        ("batch 64", &[784, 128, 10], 64),
        ("batch 1024", &[784, 128, 10], 1024),
        (
            "1024-4096-4096-10 batch 1024",
            &[1024, 4096, 4096, 10],
            1024,
        ),
    ];
    for (label, layers, batch) in steps {
        let mut model = Sequential::new();
        for (i, w) in layers.windows(2).enumerate() {
            if i > 0 {
                model = model.add(ReLU);
            }
            model = model.add(Linear::new(w[0], w[1], GPU)?);
        }
        let mut opt = Sgd::new(model.parameters(), 0.01)?;
        let (x, y) = (
            Tensor::randn([batch, layers[0]], GPU)?,
            Tensor::randint(0, 10, [batch], GPU)?,
        );
        let mut step = || -> Result<()> {
            opt.zero_grad();
            let loss = CrossEntropyLoss.forward(&model.forward(&x)?, &y)?;
            loss.backward()?;
            opt.step()
        };
        for _ in 0..3 {
            step()?;
        }
        let p = placelab::profile::profile_as(gpu, &mut step);
        // A failed step is reported, and its partial profile with it, rather than ending the run.
        eprintln!("{}", p.text());
        for r in p.rows() {
            let (Some(events), Some(model)) = (r.gpu_time, r.predicted) else {
                continue;
            };
            println!(
                "{{\"bench\":\"profile\",\"name\":\"{label}, {}: {}\",\"calls\":{},\"ms\":{:.5},\"predicted_ms\":{:.5}}}",
                r.phase.name(),
                r.name,
                r.calls,
                events.as_secs_f64() * 1e3,
                model.as_secs_f64() * 1e3
            );
        }
    }
    Ok(())
}

/// `f`'s wall time per call, in ms, as the shared H200 run measured whole steps: `n` calls
/// queued back to back and synchronised once, the median of five such runs (after three warm-up
/// calls, so that caches, cuBLAS and the pinned-memory cache are warm).
fn per_call_ms(n: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..3 {
        f()?;
    }
    cuda::synchronize(0)?;
    let mut runs = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..n {
            f()?;
        }
        cuda::synchronize(0)?;
        runs.push(t.elapsed().as_secs_f64() * 1e3 / n as f64);
    }
    Ok(median(runs))
}

fn print_op(name: &str, ms: f64) {
    println!("{{\"bench\":\"op\",\"name\":\"{name}\",\"ms\":{ms:.5}}}");
}

/// An SGD step (lr 0.01, cross-entropy) of an MLP with `layers` widths on a `batch` of random
/// inputs, under autocast to `low_precision` when given; its per-step wall time.
fn step_ms(layers: &[usize], batch: usize, low_precision: Option<DType>) -> Result<f64> {
    use placelab::nn::{CrossEntropyLoss, Linear, ReLU, Sequential};
    manual_seed(0);
    let mut model = Sequential::new();
    for (i, w) in layers.windows(2).enumerate() {
        if i > 0 {
            model = model.add(ReLU);
        }
        model = model.add(Linear::new(w[0], w[1], GPU)?);
    }
    let mut opt = Sgd::new(model.parameters(), 0.01)?;
    let x = Tensor::randn([batch, layers[0]], GPU)?;
    let y = Tensor::randint(0, *layers.last().expect("widths") as i64, [batch], GPU)?;
    let forward = || CrossEntropyLoss.forward(&model.forward(&x)?, &y);
    per_call_ms(20, || {
        opt.zero_grad();
        let loss = match low_precision {
            Some(dtype) => autocast(dtype, forward)??,
            None => forward()?,
        };
        loss.backward()?;
        opt.step()
    })
}

/// The whole-step and pinned-memory workloads of the shared H200 run (`perf_*.log`), under its
/// names: SGD steps of two MLPs (f32, and the large one under bf16 autocast), `pin_memory()` and
/// a copy into new pinned memory (`cpu_pinned()`) of 64 MiB, and an epoch of 64 pinned
/// 512×784 batches sent without waiting, each used by a matmul.
fn whole_steps() -> Result<()> {
    let small = [784, 128, 10];
    let large = [1024, 4096, 4096, 10];
    for (name, layers, batch, autocast) in [
        ("step 784-128-10 b64", &small[..], 64, None),
        ("step 784-128-10 b1024", &small[..], 1024, None),
        ("step 1024-4096-4096-10 b1024", &large[..], 1024, None),
        (
            "step 1024-4096-4096-10 b1024 bf16 autocast",
            &large[..],
            1024,
            Some(DType::BF16),
        ),
    ] {
        print_op(name, step_ms(layers, batch, autocast)?);
    }
    let host = Tensor::zeros([16 << 20], Device::Cpu)?;
    print_op(
        "pin_memory 64 MiB",
        per_call_ms(10, || host.pin_memory().map(drop))?,
    );
    let on_gpu = Tensor::zeros([16 << 20], GPU)?;
    print_op(
        "cpu_pinned 64 MiB",
        per_call_ms(10, || on_gpu.cpu_pinned().map(drop))?,
    );
    let inputs = Tensor::randn([64 * 512, 784], Device::Cpu)?;
    let targets = Tensor::zeros([64 * 512], (DType::I64, &Device::Cpu))?;
    let loader = DataLoader::new(&inputs, &targets, 512)?
        .pin_memory(true)?
        .to_device(&GPU);
    let w = Tensor::randn([784, 128], GPU)?;
    let epoch_ms = per_call_ms(1, || {
        for batch in loader.epoch()? {
            let (x, _) = batch?;
            drop(x.matmul(&w)?);
        }
        Ok(())
    })?;
    print_op("loader 64 pinned batches 512x784 + matmul", epoch_ms);
    Ok(())
}

/// The points the cost model is fitted to (issue 41): the host's time to queue one op (10,000
/// queued adds of one element), a round trip that waits for its value, and add and sum of f32
/// from 1 Ki to 64 Mi elements, each queued 50 times and synchronised once, so that a small op's
/// row is the host's issue time and a large one's the kernel's own.
fn sweeps() -> Result<()> {
    let one = Tensor::ones([1], GPU)?;
    print_op(
        "queued add [1]",
        per_call_ms(10_000, || (&one + &one).map(drop))?,
    );
    print_op(
        "add [1] + sum + item",
        per_call_ms(200, || (&one + &one)?.sum_all()?.item::<f32>().map(drop))?,
    );
    for shift in [10, 14, 18, 22, 26] {
        let n = 1usize << shift;
        let a = Tensor::randn([n], GPU)?;
        print_op(
            &format!("add 2^{shift} f32 queued"),
            per_call_ms(50, || (&a + &a).map(drop))?,
        );
        print_op(
            &format!("sum 2^{shift} f32 queued"),
            per_call_ms(50, || a.sum_all().map(drop))?,
        );
    }
    Ok(())
}

/// `gpu model FILE GPU`: the cost model's error on a run's JSON lines (this binary's output) as
/// a report: per class of rows, and each whole step measured against its prediction, with the
/// host's and the GPU's time and which binds. `GPU` is the driver's name for the GPU measured.
/// Needs no GPU: `gpu-check.sh run` calls it after the benchmark, and it reads any kept run.
fn model_report(file: &str, gpu_name: &str) -> std::result::Result<(), String> {
    use placelab::cost::fit::{Class, error, median_abs, points};
    let lines = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let gpu = cost::for_device_name(gpu_name)
        .ok_or_else(|| format!("{gpu_name}: not in placelab's table; nothing to predict"))?;
    let head = format!(
        "{{\"run\":\"{file}\",\"gpu\":\"{gpu_name}\",\"spec\":\"{}\",\"date\":\"-\",\"commit\":\"-\"}}",
        gpu.key
    );
    let run = cost::measured::parse(&format!("{head}\n{lines}"))?;
    let c = cost::FITTED;
    let errors: Vec<_> = (points(&run).into_iter())
        .map(|p| {
            let e = error(&c, gpu, &p);
            (p, e)
        })
        .collect();
    println!(
        "| rows (cost model fitted on the six H200 runs of 2026-11-28, `src/cost`) | rows | median error | largest |"
    );
    println!("|---|---|---|---|");
    let mut classes: Vec<Class> = errors.iter().map(|e| e.0.class).collect();
    classes.sort();
    classes.dedup();
    for class in classes {
        let e: Vec<f64> = (errors.iter())
            .filter(|e| e.0.class == class)
            .map(|e| e.1)
            .collect();
        let largest = e
            .iter()
            .copied()
            .fold(0.0f64, |a, b| if b.abs() > a.abs() { b } else { a });
        println!(
            "| {} | {} | {:.0}% | {:+.0}% |",
            class.name(),
            e.len(),
            100.0 * median_abs(e.iter().copied()),
            100.0 * largest
        );
    }
    println!(
        "| all | {} | {:.0}% | |",
        errors.len(),
        100.0 * median_abs(errors.iter().map(|e| e.1))
    );
    println!();
    println!("| whole step (unprofiled) | measured | predicted | host | GPU | bound |");
    println!("|---|---|---|---|---|---|");
    for (p, e) in errors.iter().filter(|e| e.0.class == Class::Step) {
        let Some(step) = p.priced.step(&c, gpu) else {
            continue;
        };
        println!(
            "| {} | {:.3} ms | {:.3} ms ({:+.0}%) | {:.3} ms | {:.3} ms | {:?} |",
            p.row.name,
            p.measured * 1e3,
            step.seconds * 1e3,
            100.0 * e,
            step.host_seconds * 1e3,
            step.gpu_seconds * 1e3,
            step.bound
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("model") {
        let (Some(file), Some(gpu)) = (args.get(2), args.get(3)) else {
            eprintln!("usage: gpu model BENCH_JSONL GPU_NAME");
            std::process::exit(2);
        };
        if let Err(e) = model_report(file, gpu) {
            eprintln!("gpu model: {e}");
            std::process::exit(1);
        }
        return Ok(());
    }
    let simulated = matches!(Device::Cuda(0).kind(), Ok(DeviceKind::SimulatedGpu { .. }));
    if !cuda::is_available() || simulated {
        eprintln!(
            "no real CUDA device ({:?}): nothing to measure",
            cuda::unavailable_reason()
        );
        return Ok(());
    }
    let t = Instant::now();
    let first = Tensor::zeros([1], Device::Cpu)?.to(&GPU)?;
    eprintln!(
        "{}: context {:?}, first transfer {} (call {:?})",
        cuda::device_name(0)?,
        cuda::context_setup_time(0),
        first.last_transfer().expect("a transfer"),
        t.elapsed()
    );
    transfers()?;
    non_blocking()?;
    if cuda::device_count() >= 2 {
        peer()?;
    }
    ops()?;
    whole_steps()?;
    sweeps()?;
    gpu_overlap::overlap()?;
    gpu_overlap::lesson(spec())?;
    profiled_steps()
}
