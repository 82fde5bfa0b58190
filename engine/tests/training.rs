//! Training on any device: modules, losses and optimizers against PyTorch's numbers, moving
//! models, mixed precision, DataParallel, and an MLP that learns — identically on the CPU and a
//! simulated GPU.

#[path = "support/own_process.rs"]
mod own_process;
#[path = "support/stand_in.rs"]
mod stand_in;

use placelab::nn::{CrossEntropyLoss, Linear, MSELoss, NLLLoss, ReLU, Sequential, summary};
use placelab::prelude::*;

/// The random generator is process-wide (as PyTorch's): tests that seed it take turns.
static SEEDED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn seeded() -> std::sync::MutexGuard<'static, ()> {
    SEEDED.lock().unwrap_or_else(|e| e.into_inner())
}

fn f64s(v: &[f64], device: Device) -> Tensor {
    Tensor::from_vec(v.to_vec(), [v.len()], device).unwrap()
}

type MakeOptimizer = Box<dyn Fn(Vec<Tensor>) -> Box<dyn Optimizer>>;

/// Runs three steps with fixed gradients, as the PyTorch reference script did.
fn three_steps(make: impl Fn(Vec<Tensor>) -> Box<dyn Optimizer>) -> Vec<f64> {
    let p = f64s(&[1.0, -2.0, 0.5], Device::Cpu)
        .requires_grad_(true)
        .unwrap();
    let mut opt = make(vec![p.clone()]);
    for g in [[0.1, 0.2, -0.3], [-0.5, 0.4, 0.0], [0.3, -0.1, 0.2]] {
        opt.zero_grad();
        p.set_grad(Some(f64s(&g, Device::Cpu)));
        opt.step().unwrap();
    }
    p.to_vec::<f64>().unwrap()
}

#[test]
fn optimizers_follow_pytorch_exactly() {
    // Values from torch 2.15 (torch.optim.SGD / Adam / AdamW, float64, same gradients).
    let cases: Vec<(&str, MakeOptimizer, [f64; 3])> = vec![
        (
            "sgd",
            Box::new(|p| Box::new(Sgd::new(p, 0.1).unwrap())),
            [1.01, -2.05, 0.51],
        ),
        (
            "sgd momentum wd",
            Box::new(|p| Box::new(Sgd::new(p, 0.1).unwrap().momentum(0.9).weight_decay(0.01))),
            [1.032282789, -2.108873618, 0.5583834295],
        ),
        (
            "sgd nesterov",
            Box::new(|p| Box::new(Sgd::new(p, 0.1).unwrap().momentum(0.9).nesterov(true))),
            [1.04411, -2.15818, 0.56517],
        ),
        (
            "sgd dampening",
            Box::new(|p| Box::new(Sgd::new(p, 0.1).unwrap().momentum(0.5).dampening(0.3))),
            [1.014, -2.07, 0.5385],
        ),
        (
            "adam",
            Box::new(|p| Box::new(Adam::new(p, 0.01).unwrap())),
            [0.9967288866915633, -2.025537886557849, 0.5174629621381477],
        ),
        (
            "adam wd",
            Box::new(|p| Box::new(Adam::new(p, 0.01).unwrap().weight_decay(0.1))),
            [0.9915361425502198, -2.0053054246474007, 0.5133840161217524],
        ),
        (
            "adamw",
            Box::new(|p| Box::new(Adam::adamw(p, 0.01).unwrap())),
            [0.9964303182361979, -2.0249349814739537, 0.5173103071794919],
        ),
    ];
    for (name, make, want) in cases {
        let got = three_steps(make);
        for i in 0..3 {
            assert!(
                (got[i] - want[i]).abs() < 1e-12,
                "{name}: {got:?} vs PyTorch {want:?}"
            );
        }
    }
}

#[test]
fn losses_match_pytorch() {
    let x = Tensor::from_vec(vec![1.0f64, 2.0, 0.5, -1.0, 0.0, 3.0], [2, 3], Device::Cpu).unwrap();
    let t = Tensor::from_vec(vec![2i64, 0], [2], Device::Cpu).unwrap();
    let ce = CrossEntropyLoss
        .forward(&x, &t)
        .unwrap()
        .item::<f64>()
        .unwrap();
    assert!((ce - 3.015126343932687).abs() < 1e-12, "{ce}");
    assert_eq!(
        NLLLoss.forward(&x, &t).unwrap().item::<f64>().unwrap(),
        0.25
    );
    let half = x.full_like(0.5).unwrap();
    assert_eq!(
        MSELoss.forward(&x, &half).unwrap().item::<f64>().unwrap(),
        1.875
    );

    let e = CrossEntropyLoss
        .forward(&x, &t.to_dtype(DType::I32).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Targets are class indices and must be i64"),
        "{e}"
    );
    let e = CrossEntropyLoss
        .forward(&x, &Tensor::zeros([3], (DType::I64, Device::Cpu)).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("one class index per row of the input, shape [2]"),
        "{e}"
    );
    let e = CrossEntropyLoss
        .forward(
            &x,
            &Tensor::from_vec(vec![0i64, 3], [2], Device::Cpu).unwrap(),
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("index 3 out of range in nll_loss: dimension 1 has size 3"),
        "{e}"
    );
    let e = MSELoss
        .forward(&x, &Tensor::zeros([3], Device::Cpu).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("must have the same shape"), "{e}");
}

fn mlp(device: Device) -> Sequential {
    Sequential::new()
        .add(Linear::new(784, 128, device).unwrap())
        .add(ReLU)
        .add(Linear::new(128, 10, device).unwrap())
}

/// Ten classes in 784 dimensions: `center[c] + 2·noise` (separable, but not at a glance).
fn dataset(n: usize, device: Device) -> (Tensor, Tensor) {
    manual_seed(1234);
    let centers = Tensor::randn([10, 784], Device::Cpu).unwrap();
    let labels = Tensor::randint(0, 10, [n], Device::Cpu).unwrap();
    let x = (&centers.index_select(0, &labels).unwrap()
        + &Tensor::randn([n, 784], Device::Cpu)
            .unwrap()
            .mul(2.0)
            .unwrap())
        .unwrap();
    (x.to(&device).unwrap(), labels.to(&device).unwrap())
}

/// Trains the 784→128→10 MLP for 40 steps of batch 64 with SGD(0.05, momentum 0.9); returns the losses.
fn train(device: Device) -> Vec<f32> {
    let (x, y) = dataset(640, device);
    manual_seed(7);
    let model = mlp(device);
    let mut opt = Sgd::new(model.parameters(), 0.05).unwrap().momentum(0.9);
    let mut losses = Vec::new();
    for step in 0..40 {
        let i = (step % 10) * 64;
        let (xb, yb) = (x.narrow(0, i, 64).unwrap(), y.narrow(0, i, 64).unwrap());
        let loss = CrossEntropyLoss
            .forward(&model.forward(&xb).unwrap(), &yb)
            .unwrap();
        opt.zero_grad();
        loss.backward().unwrap();
        opt.step().unwrap();
        losses.push(loss.item::<f32>().unwrap());
    }
    for p in model.parameters() {
        assert_eq!(p.device(), device);
        assert_eq!(
            p.grad().unwrap().device(),
            device,
            "gradients live on the parameters' device"
        );
    }
    losses
}

#[test]
fn mlp_learns_identically_on_cpu_and_simulated_gpu() {
    let _g = seeded();
    stand_in::gpus(2, None).unwrap();
    let cpu = train(Device::Cpu);
    assert!(cpu[0] > 1.5, "starts near ln 10: {}", cpu[0]);
    let last = cpu[cpu.len() - 10..].iter().sum::<f32>() / 10.0;
    assert!(last < 0.05, "the last 10 losses average {last}: {cpu:?}");
    let gpu = train(Device::Cuda(0));
    if stand_in::kind() == stand_in::StandIn::Simulated {
        assert_eq!(
            cpu, gpu,
            "same seed, same kernels: the same losses bit for bit"
        );
    } else {
        // The GPU's kernels (its exp, its order of sums, cuBLAS's transposed product) round
        // differently in the last bits; forty steps keep the losses within 1e-4 of each other.
        let close = cpu
            .iter()
            .zip(&gpu)
            .all(|(c, g)| (c - g).abs() <= 1e-4 * c.abs().max(1e-6));
        assert!(close, "the same losses within 1e-4:\n{cpu:?}\n{gpu:?}");
    }
}

#[test]
fn a_linear_layers_gradients_are_laid_out_like_its_parameters() {
    // The weight enters the product as `weight.t()`; its gradient comes back contiguous, as the
    // weight is, so accumulating and stepping it needs no transposed copy. Values: xᵀ·g.
    let model = mlp(Device::Cpu);
    let x = Tensor::randn([64, 784], Device::Cpu).unwrap();
    let out = model.forward(&x).unwrap();
    out.sum_all().unwrap().backward().unwrap();
    for (name, p) in model.named_parameters() {
        let g = p.grad().unwrap();
        assert!(g.is_contiguous(), "{name}: strides {:?}", g.strides());
        assert_eq!(g.shape(), p.shape(), "{name}");
    }
    let w2 = &model.named_parameters()[2].1;
    let h = model.named_parameters()[0].1.clone();
    let hidden = x
        .matmul(&h.t().unwrap())
        .unwrap()
        .add(&model.named_parameters()[1].1)
        .unwrap()
        .relu()
        .unwrap();
    // d(sum)/dW2[o, i] = Σ_batch hidden[b, i].
    let want = hidden.sum(0, false).unwrap().to_vec::<f32>().unwrap();
    let got = w2.grad().unwrap().to_vec2::<f32>().unwrap();
    for row in got {
        for (g, w) in row.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-3 * w.abs().max(1.0), "{g} vs {w}");
        }
    }
}

#[test]
fn moving_a_model_reports_and_mismatches_name_the_parameter() {
    let _g = seeded();
    stand_in::gpus(2, None).unwrap();
    let mut model = mlp(Device::Cpu);
    assert_eq!(model.num_parameters(), 101_770);
    let report = model.to(&Device::Cuda(1)).unwrap();
    assert_eq!((report.tensors, report.bytes), (4, 101_770 * 4));
    assert!(
        report
            .to_string()
            .starts_with("moved 4 parameter tensor(s), 397.54 KiB to cuda:1 in "),
        "{report}"
    );
    assert!(
        model
            .parameters()
            .iter()
            .all(|p| p.device() == Device::Cuda(1) && p.requires_grad() && p.is_leaf())
    );
    assert_eq!(
        model.to(&Device::Cuda(1)).unwrap().tensors,
        0,
        "already there"
    );

    let x = Tensor::randn([2, 784], Device::Cpu).unwrap();
    let e = model.forward(&x).unwrap_err().to_string();
    assert!(
        e.starts_with("device mismatch in linear: `input` is on cpu but `0.weight` is on cuda:1."),
        "{e}"
    );

    let card = summary(&model);
    assert!(
        card.starts_with(&format!(
            "Sequential(3 layers) · 101,770 parameters · 397.54 KiB · cuda:1 ({})",
            stand_in::label()
        )),
        "{card}"
    );
    assert!(
        card.contains("Linear(784 → 128)") && card.contains("100,480 params"),
        "{card}"
    );
    // One parameter left behind is flagged by name.
    let mut half_moved = mlp(Device::Cpu);
    half_moved
        .visit_parameters_mut(&mut |n, p| {
            if n == "2.bias" {
                *p = no_grad(|| p.to(&Device::Cuda(0)))?.requires_grad_(true)?;
            }
            Ok(())
        })
        .unwrap();
    let card = summary(&half_moved);
    assert!(
        card.contains("⚠ parameters are on 2 devices (cpu, cuda:0); 0.weight on cpu"),
        "{card}"
    );

    let mut opt = Sgd::new(mlp(Device::Cpu).parameters(), 0.1).unwrap();
    let e = opt.step().unwrap_err().to_string();
    assert!(e.contains("no parameter has a gradient"), "{e}");
}

#[test]
fn autocast_lowers_matmuls_and_keeps_losses_in_f32() {
    let _g = seeded();
    manual_seed(5);
    let model = mlp(Device::Cpu);
    let (x, y) = dataset(64, Device::Cpu);
    let (logits, loss) = autocast(DType::BF16, || {
        let logits = model.forward(&x).unwrap();
        let loss = CrossEntropyLoss.forward(&logits, &y).unwrap();
        (logits, loss)
    })
    .unwrap();
    assert_eq!((logits.dtype(), loss.dtype()), (DType::BF16, DType::F32));
    loss.backward().unwrap();
    for p in model.parameters() {
        assert_eq!(
            p.grad().unwrap().dtype(),
            DType::F32,
            "gradients come back in the parameters' dtype"
        );
    }
    let full = CrossEntropyLoss
        .forward(&model.forward(&x).unwrap(), &y)
        .unwrap()
        .item::<f32>()
        .unwrap();
    assert!(
        (full - loss.item::<f32>().unwrap()).abs() < 0.05,
        "bf16 stays close to f32: {full}"
    );
    assert!(autocast(DType::F32, || ()).is_err());
}

#[test]
fn grad_scaler_skips_overflowing_steps_and_adapts_its_scale() {
    let p = Tensor::from_vec(vec![1.0f32, 2.0], [2], Device::Cpu)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let mut opt = Sgd::new(vec![p.clone()], 0.5).unwrap();
    let mut scaler = GradScaler::new();
    scaler.growth_interval = 2;
    assert_eq!(scaler.get_scale(), 65536.0);
    for expect_scale in [65536.0, 131072.0] {
        opt.zero_grad();
        scaler
            .scale(&p.mul(&p).unwrap().sum_all().unwrap())
            .unwrap()
            .backward()
            .unwrap();
        assert!(scaler.step(&mut opt).unwrap());
        scaler.update();
        assert_eq!(scaler.get_scale(), expect_scale);
    }
    // Two clean steps: p ← p − 0.5·2p each time, with the gradients unscaled first.
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![0.0, 0.0]);
    opt.zero_grad();
    p.set_grad(Some(
        Tensor::from_vec(vec![f32::INFINITY, 1.0], [2], Device::Cpu).unwrap(),
    ));
    assert!(
        !scaler.step(&mut opt).unwrap(),
        "an inf gradient skips the step"
    );
    assert!(scaler.found_inf());
    scaler.update();
    assert_eq!(scaler.get_scale(), 65536.0, "and halves the scale");
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![0.0, 0.0]);
}

#[test]
fn data_parallel_matches_one_device() {
    let _g = seeded();
    stand_in::gpus(2, None).unwrap();
    let (x, y) = dataset(10, Device::Cpu);
    manual_seed(3);
    let single = mlp(Device::Cuda(0));
    let loss1 = CrossEntropyLoss
        .forward(
            &single.forward(&x.cuda().unwrap()).unwrap(),
            &y.cuda().unwrap(),
        )
        .unwrap();
    loss1.backward().unwrap();
    manual_seed(3);
    let dp =
        DataParallel::new(mlp(Device::Cuda(0)), vec![Device::Cuda(0), Device::Cuda(1)]).unwrap();
    assert!(dp.note().is_none());
    let out = dp.forward(&x).unwrap();
    assert_eq!(
        (out.device(), out.shape()),
        (Device::Cuda(0), &[10usize, 10][..])
    );
    let loss2 = CrossEntropyLoss.forward(&out, &y.cuda().unwrap()).unwrap();
    assert!((loss1.item::<f32>().unwrap() - loss2.item::<f32>().unwrap()).abs() < 1e-6);
    loss2.backward().unwrap();
    for (a, b) in single.parameters().iter().zip(dp.parameters()) {
        let (ga, gb) = (
            a.grad().unwrap().to_vec::<f32>().unwrap(),
            b.grad().unwrap().to_vec::<f32>().unwrap(),
        );
        assert_eq!(
            b.grad().unwrap().device(),
            Device::Cuda(0),
            "replica gradients are reduced onto the first device"
        );
        assert!(
            ga.iter().zip(&gb).all(|(u, v)| (u - v).abs() < 1e-5),
            "the two replicas' gradients sum to the full batch's"
        );
    }
    assert!(dp.parameters().len() == 4 && dp.named_parameters()[0].0 == "module.0.weight");

    let one = DataParallel::new(mlp(Device::Cuda(0)), vec![Device::Cuda(0)]).unwrap();
    assert!(
        one.note()
            .unwrap()
            .contains("DataParallel over one device does nothing")
    );
    // As in the tutorials: wrap a CPU model, then move it.
    let mut wrapped = DataParallel::new(mlp(Device::Cpu), vec![]).unwrap();
    let e = wrapped.forward(&x).unwrap_err().to_string();
    assert!(
        e.contains(
            "device mismatch in DataParallel: `the first device` is on cuda:0 but `0.weight` is on cpu"
        ),
        "{e}"
    );
    wrapped.to(&Device::Cuda(0)).unwrap();
    assert_eq!(wrapped.forward(&x).unwrap().shape(), &[10, 10]);
}

/// One SGD step (zero_grad, forward, loss, backward, step) of `model` on a batch.
fn sgd_step(model: &Sequential, opt: &mut Sgd, (x, y): (&Tensor, &Tensor)) -> placelab::Result<()> {
    opt.zero_grad();
    let loss = CrossEntropyLoss.forward(&model.forward(x)?, y)?;
    loss.backward()?;
    opt.step()
}

fn profile_step(model: &Sequential, opt: &mut Sgd, batch: (&Tensor, &Tensor)) -> Profile {
    profile(|| sgd_step(model, opt, batch))
}

#[test]
fn a_profile_puts_a_training_steps_ops_and_memory_in_its_phases() {
    use placelab::cost;
    use placelab::profile::Phase;
    let me = "a_profile_puts_a_training_steps_ops_and_memory_in_its_phases";
    // Memory totals and the peak are the whole process's: no other test may allocate meanwhile.
    if !own_process::in_own_process(me, &[]) {
        return;
    }
    match stand_in::kind() {
        stand_in::StandIn::Simulated => cuda::simulate_as(1, "h100").unwrap(),
        stand_in::StandIn::Emulated => stand_in::gpus(1, None).unwrap(),
    }
    for device in [Device::Cpu, Device::Cuda(0)] {
        let (x, y) = dataset(512, device);
        let model = mlp(device);
        let mut opt = Sgd::new(model.parameters(), 0.05).unwrap().momentum(0.9);
        // A first step makes the momentum buffers (and, on a GPU, loads the kernels).
        assert!(profile_step(&model, &mut opt, (&x, &y)).failure().is_none());
        memory::reset_peak(&device).unwrap();
        let before = memory::allocated(&device).unwrap() as u64;
        let p = profile_step(&model, &mut opt, (&x, &y));
        assert_eq!(p.failure(), None);
        let rows = p.rows();
        let row = |phase: Phase, name: &str| {
            rows.iter()
                .find(|r| r.phase == phase && r.name == name && r.device == device)
                .unwrap_or_else(|| panic!("no {name} row in {phase:?} on {device}:\n{}", p.text()))
        };
        // Each Linear's b + x·Wᵀ: once forward, one GEMM adding the product onto the bias (no
        // separate add, as PyTorch's addmm), and backward once for the weight's gradient and once
        // for the input's
        assert_eq!(row(Phase::Forward, "addmm").calls, 2, "{}", p.text());
        assert!(
            !rows
                .iter()
                .any(|r| r.phase == Phase::Forward && r.name == "add"),
            "{}",
            p.text()
        );
        // (the first layer's input needs no gradient: x is data).
        assert_eq!(
            row(Phase::Backward, "matmul (in addmm's backward)").calls,
            3,
            "{}",
            p.text()
        );
        assert!(row(Phase::Forward, "relu").calls == 1);
        assert!(
            rows.iter().any(|r| r.phase == Phase::Optimizer),
            "{}",
            p.text()
        );
        let ops_total = p.ops_total();
        assert!(ops_total <= p.wall() && ops_total > std::time::Duration::ZERO);
        // The timeline starts and ends where the device's allocator did, and its peak is the
        // allocator's own.
        let steps = p.steps(&device);
        assert_eq!(steps.first().unwrap().1, before);
        assert_eq!(
            steps.last().unwrap().1,
            memory::allocated(&device).unwrap() as u64
        );
        let peak = p.peak(&device).expect("the step allocated");
        assert_eq!(
            peak.allocated as usize,
            memory::stats(&device).unwrap().peak_allocated_bytes
        );
        assert!(
            peak.allocated > before && peak.reached_by.op.is_some(),
            "{}",
            p.text()
        );
        let held: u64 = peak.held.iter().map(|b| b.bytes).sum();
        assert!(
            held >= peak.allocated - before,
            "what the step made and held covers its rise"
        );
        // Predicted times only where the device stands for a named GPU: the first forward
        // addmm (512×784 by 784×128) priced by the cost model with its own dims: its GEMM
        // alone, as a GPU adds the bias in the GEMM's epilogue (a simulated device, which
        // copies the bias into the output first, does not price that copy).
        let first = p.ops().iter().find(|o| o.op == Op::Addmm).unwrap();
        let addmm = |gpu| {
            let gemm = cost::matmul(gpu, (1, 512, 128, 784), 4, cost::Arithmetic::F32);
            Some(std::time::Duration::from_secs_f64(gemm))
        };
        let simulated_h100 = device.is_cuda() && stand_in::kind() == stand_in::StandIn::Simulated;
        match simulated_h100 {
            true => {
                assert_eq!(first.predicted, addmm(cost::find("h100").unwrap()));
                assert!(p.text().contains("predicted"), "{}", p.text());
                // The step as a whole: the host's time to queue its ops against the kernels'
                // time back to back; this small step keeps an H100 waiting for the host.
                let step = p.predicted_step().unwrap();
                let ops = p.ops().iter().filter(|o| o.predicted.is_some()).count();
                let f = cost::FITTED;
                let host = ops as f64 * f.step_op;
                assert!((step.host_seconds - host).abs() < 1e-9, "{step:?}");
                assert!(step.gpu_seconds < step.host_seconds, "{step:?}");
                assert_eq!(
                    (step.bound, step.seconds),
                    (cost::Bound::Host, step.host_seconds)
                );
                assert!(
                    p.text()
                        .contains("host-bound: the GPU would wait for the host")
                );
            }
            false => assert_eq!(p.predicted_total(), None),
        }
        // On an emulated GPU (the CUDA backend) each op's work is also timed between CUDA
        // events on the stream (read after the step, the host not waiting for it); elsewhere
        // nothing is.
        let emulated = device.is_cuda() && stand_in::kind() == stand_in::StandIn::Emulated;
        let on_device = p.ops().iter().filter(|o| o.device == device);
        for op in on_device.filter(|o| o.op != Op::AutogradEngine) {
            match (emulated, op.gpu_time) {
                (true, Some(gpu)) => assert!(gpu > std::time::Duration::ZERO, "{op:?}"),
                (false, None) => {}
                _ => panic!("{op:?} on {device}, emulated: {emulated}"),
            }
        }
        assert_eq!(p.text().contains("on GPU"), emulated, "{}", p.text());
        // gpu-check's way to hold the model against a GPU's events: every op priced as an H100.
        if emulated {
            let h100 = cost::find("h100").unwrap();
            let priced =
                placelab::profile::profile_as(h100, || sgd_step(&model, &mut opt, (&x, &y)));
            let first = priced.ops().iter().find(|o| o.op == Op::Addmm).unwrap();
            assert_eq!(first.predicted, addmm(h100));
            assert!(first.gpu_time.is_some(), "{first:?}");
        }
    }
}

#[test]
fn a_profile_of_failing_code_reports_the_failure_and_the_ops_before_it() {
    let me = "a_profile_of_failing_code_reports_the_failure_and_the_ops_before_it";
    if !own_process::in_own_process(me, &[]) {
        return;
    }
    let before = memory::allocated(&Device::Cpu).unwrap();
    let p = profile(|| {
        let a = Tensor::randn([64, 64], Device::Cpu)?;
        let b = a.matmul(&a)?.relu()?;
        b.matmul(&Tensor::randn([3, 5], Device::Cpu)?)
    });
    let failure = p.failure().expect("the second matmul fails");
    assert!(failure.contains("matmul"), "{failure}");
    assert!(p.text().starts_with("the code failed"), "{}", p.text());
    let names: Vec<&str> = p.ops().iter().map(|o| o.op.name()).collect();
    // The ops that ran (the draws too, as PyTorch's profiler lists them), then the one that
    // failed (its checks ran, and took their time).
    assert_eq!(names, ["randn", "matmul", "relu", "randn", "matmul"]);
    assert_eq!(
        memory::allocated(&Device::Cpu).unwrap(),
        before,
        "what the code freed is freed"
    );
    assert_eq!(p.steps(&Device::Cpu).last().unwrap().1 as usize, before);
    // A panic is a failure too, and a profile inside a profile says it records nothing.
    let p = profile(|| -> placelab::Result<()> { panic!("boom") });
    assert_eq!(p.failure(), Some("panicked: boom"));
    let outer = profile(|| {
        let inner = profile(|| Tensor::zeros([4], Device::Cpu));
        assert!(inner.failure().unwrap().contains("do not nest"));
        Tensor::zeros([4], Device::Cpu)
    });
    assert_eq!(outer.ops().len(), 2, "the outer profile records both fills");
}

/// `profile_value` keeps what the code gave beside its profile (what `:profile` shows below the
/// profile): its value, or its error, which the profile gives too; a panic goes on unwinding
/// once the recording has ended.
#[test]
fn a_profile_value_keeps_the_codes_value_or_its_error() {
    let me = "a_profile_value_keeps_the_codes_value_or_its_error";
    if !own_process::in_own_process(me, &[]) {
        return;
    }
    let a = Tensor::ones([2, 3], Device::Cpu).unwrap();
    let b = Tensor::ones([3, 2], Device::Cpu).unwrap();
    let (p, product) = placelab::profile::profile_value(|| a.matmul(&b));
    assert_eq!(product.unwrap().to_vec::<f32>().unwrap(), [3.0; 4]);
    assert_eq!(p.failure(), None);
    assert_eq!(
        p.ops().iter().map(|o| o.op.name()).collect::<Vec<_>>(),
        ["matmul"]
    );
    let (p, failed) = placelab::profile::profile_value(|| a.matmul(&a));
    let error = failed.unwrap_err().to_string();
    assert!(error.contains("matmul"), "{error}");
    assert_eq!(p.failure(), Some(error.as_str()));
    let panicked = std::panic::catch_unwind(|| {
        placelab::profile::profile_value(|| -> placelab::Result<()> { panic!("boom") })
    });
    assert!(panicked.is_err(), "the panic goes on");
    let after = profile(|| a.relu());
    assert_eq!(after.failure(), None, "the panic ended the recording");
    assert_eq!(after.ops().len(), 1);
}

/// Everything a profile places on its timeline (each op, each block made or taken back) lies
/// within the code's wall time, so the memory line and the sparkline end where the code did and
/// a peak reached as the code returns is drawn inside them.
#[test]
fn a_profile_places_its_ops_and_blocks_within_the_wall_time() {
    let me = "a_profile_places_its_ops_and_blocks_within_the_wall_time";
    if !own_process::in_own_process(me, &[]) {
        return;
    }
    // The last op's block is made as the code returns: the closest a point can come to the end.
    for _ in 0..20 {
        let p = profile(|| Tensor::zeros([1024], Device::Cpu));
        let wall = p.wall();
        let steps = p.steps(&Device::Cpu);
        assert!(steps.len() >= 3, "the start, the block, the end: {steps:?}");
        for (at, _) in &steps {
            assert!(
                *at <= wall,
                "a block at {at:?}, after the wall time {wall:?}"
            );
        }
        for op in p.ops() {
            let end = op.start + op.measured;
            assert!(end <= wall, "{} ends at {end:?}, after {wall:?}", op.op);
        }
    }
}

/// On a busy machine the code's wall time includes time its thread only waited for a core; the
/// profile measures that wait and says it, so the time between ops is not blamed on the code.
#[test]
fn a_profile_says_how_long_its_code_waited_for_a_cpu_core() {
    let me = "a_profile_says_how_long_its_code_waited_for_a_cpu_core";
    if !own_process::in_own_process(me, &[]) {
        return;
    }
    // SAFETY: a zeroed cpu_set_t with one bit set, for the calling thread (pid 0).
    let pin_to_cpu_0 = || unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
            0
        );
    };
    let a = Tensor::randn([64], Device::Cpu).unwrap();
    let quiet = profile(|| (&a + &a).map(drop));
    assert!(quiet.cpu_wait().is_some(), "Linux keeps each thread's wait");
    // A spinning thread and this one on one core: the scheduler shares it between them.
    pin_to_cpu_0();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            pin_to_cpu_0();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    let started = std::time::Instant::now();
    let busy = profile(|| {
        while started.elapsed() < std::time::Duration::from_millis(200) {
            drop(&a + &a);
        }
        Ok(())
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    spinner.join().unwrap();
    let waited = busy.cpu_wait().unwrap();
    assert!(
        waited >= busy.wall() / 10 && waited <= busy.wall(),
        "waited {waited:?} of {:?}",
        busy.wall()
    );
    assert!(
        busy.text().contains("this thread waited for a CPU core"),
        "{}",
        busy.text()
    );
}

/// A `DataLoader` serves every sample once per epoch, in a new order each epoch (the same one
/// after the same seed), the last batch smaller; pinned and moved to a GPU, each batch arrives
/// there through a non-blocking copy from page-locked memory, the next one queued ahead.
#[test]
fn a_data_loader_serves_every_sample_once_per_epoch_where_it_was_asked() {
    let _seed = seeded();
    stand_in::gpus(1, None).unwrap();
    let gpu = Device::Cuda(0);
    let x = Tensor::arange(0, 10, Device::Cpu)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .reshape([10, 1])
        .unwrap();
    let y = Tensor::arange(0, 10, Device::Cpu).unwrap();
    let loader = DataLoader::new(&x, &y, 4).unwrap().shuffle(true);
    assert_eq!((loader.len(), loader.samples()), (3, 10));
    let epoch = |loader: &DataLoader| -> Vec<Vec<i64>> {
        loader
            .epoch()
            .unwrap()
            .map(|b| {
                let (xb, yb) = b.unwrap();
                // Inputs and targets stay paired.
                assert_eq!(
                    xb.to_vec::<f32>().unwrap(),
                    yb.to_vec::<i64>()
                        .unwrap()
                        .iter()
                        .map(|&v| v as f32)
                        .collect::<Vec<_>>()
                );
                yb.to_vec::<i64>().unwrap()
            })
            .collect()
    };
    manual_seed(7);
    let first = epoch(&loader);
    let second = epoch(&loader);
    assert_eq!(first.iter().map(Vec::len).collect::<Vec<_>>(), [4, 4, 2]);
    for e in [&first, &second] {
        let mut all: Vec<i64> = e.concat();
        all.sort();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }
    assert_ne!(first, second, "each epoch draws a new order");
    manual_seed(7);
    assert_eq!(epoch(&loader), first, "the same seed gives the same order");
    // In order, unshuffled; then pinned and prefetched onto the GPU.
    let plain = DataLoader::new(&x, &y, 4).unwrap();
    assert_eq!(
        epoch(&plain),
        [vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]
    );
    let onto_gpu = plain.clone().pin_memory(true).unwrap().to_device(&gpu);
    let batches: Vec<(Tensor, Tensor)> = onto_gpu.epoch().unwrap().map(Result::unwrap).collect();
    for (xb, yb) in &batches {
        assert_eq!((xb.device(), yb.device()), (gpu, gpu));
        let t = xb.last_transfer().expect("each batch was copied");
        assert_eq!(
            (t.memory, t.mode),
            (
                placelab::transfer::HostMemoryKind::Pinned,
                placelab::transfer::CopyMode::NonBlocking
            )
        );
    }
    assert_eq!(batches[2].1.to_vec::<i64>().unwrap(), [8, 9]);
    // Mistakes are errors that say what to fix.
    let short = Tensor::zeros([9], Device::Cpu).unwrap();
    let e = DataLoader::new(&x, &short, 4).err().unwrap().to_string();
    assert!(e.contains("one row per sample"), "{e}");
    assert!(
        DataLoader::new(&x, &y, 0)
            .err()
            .unwrap()
            .to_string()
            .contains("batch_size must be at least 1")
    );
    let on_gpu = DataLoader::new(&x.to(&gpu).unwrap(), &y.to(&gpu).unwrap(), 4).unwrap();
    let e = on_gpu.pin_memory(true).err().unwrap().to_string();
    assert!(e.contains("the data is on cuda:0 already"), "{e}");
    let e = DataLoader::new(&x, &y.to(&gpu).unwrap(), 4)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("device mismatch"), "{e}");
}

/// The tests above, again on emulated devices: the CUDA backend and `kernels/*.cu` do the work.
#[test]
fn every_test_again_on_emulated_devices() {
    stand_in::rerun_emulated("every_test_again_on_emulated_devices");
}
