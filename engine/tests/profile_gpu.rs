//! The profiler on a GPU, on emulated devices (the CUDA backend's own calls, its stream a worker
//! thread): by default no op waits for its work, so a profiled step runs as it does unprofiled,
//! and each op's GPU time comes from CUDA events read once the code returned; `profile_blocking`
//! makes each op wait, as `CUDA_LAUNCH_BLOCKING=1` does. The tests run one at a time (`serial`),
//! since the emulator's counters (host waits, live events) are the process's.

use std::sync::Mutex;
use std::time::Duration;

use placelab::gpu::emulated;
use placelab::nn::{CrossEntropyLoss, Linear, Module, ReLU, Sequential};
use placelab::prelude::*;
use placelab::profile::{self, Profile};

const GPU: Device = Device::Cuda(0);

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The host's waits for the emulated streams while `f` ran, and what it returned.
fn waits_in<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let before = emulated::host_waits();
    let out = f();
    (emulated::host_waits() - before, out)
}

/// Notebook 04's step: the 784-128-10 MLP at batch 64, SGD, on `cuda:0`.
struct Step {
    model: Sequential,
    opt: Sgd,
    x: Tensor,
    y: Tensor,
}

impl Step {
    fn new() -> Step {
        manual_seed(3);
        let model = Sequential::new()
            .add(Linear::new(784, 128, GPU).unwrap())
            .add(ReLU)
            .add(Linear::new(128, 10, GPU).unwrap());
        let opt = Sgd::new(model.parameters(), 0.05).unwrap();
        let x = Tensor::randn([64, 784], GPU).unwrap();
        let y = Tensor::randint(0, 10, [64], GPU).unwrap();
        let mut step = Step { model, opt, x, y };
        step.run().unwrap(); // the first step makes the gradients
        cuda::synchronize(0).unwrap();
        step
    }

    fn run(&mut self) -> placelab::Result<()> {
        self.opt.zero_grad();
        let loss = CrossEntropyLoss.forward(&self.model.forward(&self.x)?, &self.y)?;
        loss.backward()?;
        self.opt.step()
    }
}

/// The ops on the GPU that run work there (the autograd engine's graph walk is host code).
/// An `n × n` matrix on the emulated GPU whose product has run once (the cuBLAS workspace and
/// the GEMM's kernel are in place), with nothing left queued.
fn warm_square(n: usize) -> Tensor {
    cuda::emulate(1, None).unwrap();
    let a = Tensor::randn([n, n], GPU).unwrap();
    drop(a.matmul(&a).unwrap());
    cuda::synchronize(0).unwrap();
    a
}

fn gpu_ops(p: &Profile) -> impl Iterator<Item = &profile::OpRecord> {
    p.ops()
        .iter()
        .filter(|o| o.device == GPU && o.op != Op::AutogradEngine)
}

#[test]
fn a_profiled_step_waits_for_its_gpu_once_not_after_each_op() {
    let _serial = serial();
    cuda::emulate(1, None).unwrap();
    let mut step = Step::new();
    let (unprofiled, ran) = waits_in(|| step.run());
    ran.unwrap();
    cuda::synchronize(0).unwrap();
    let events = emulated::live_events();
    let (profiled, p) = waits_in(|| profile::profile(|| step.run()));
    assert_eq!(p.failure(), None);
    let ops = gpu_ops(&p).count();
    assert!(ops >= 15, "a step is some 20 ops on the GPU:\n{}", p.text());
    // The step's own waits (none), plus one for the device at the end (`cuda::synchronize`'s: an
    // interruptible wait, then the stream's) and the read of the loss's index checks after it
    // (a copy of their slots, `gpu/checks.rs`), not one per op.
    assert!(
        profiled <= unprofiled + 3,
        "the profiled step waited {profiled} times for the GPU, {unprofiled} unprofiled, over {ops} ops:\n{}",
        p.text()
    );
    // Every op's work still has its time on the stream, and its events are gone.
    for op in gpu_ops(&p) {
        assert!(op.gpu_time.is_some_and(|g| g > Duration::ZERO), "{op:?}");
    }
    assert_eq!(
        emulated::live_events(),
        events,
        "the profile's events are destroyed"
    );
    // The table gives host and GPU time apart, per phase too, and how busy the GPU was.
    let text = p.text();
    eprintln!("{text}");
    assert!(text.lines().next().unwrap().contains(" host "), "{text}");
    assert!(
        text.contains("on GPU") && !text.contains("measured"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("forward    total") && l.contains(" host, ")),
        "{text}"
    );
    let busy = p.gpu_busy();
    assert_eq!(busy.len(), 1, "{busy:?}");
    assert!(
        busy[0].span >= p.wall() && busy[0].share() <= 1.0,
        "{busy:?}"
    );
    let line = text.lines().find(|l| l.starts_with("cuda:0 busy")).unwrap();
    assert!(
        line.contains("-bound") || line.contains("neither"),
        "{line}"
    );
    let html = p.html();
    for shown in ["host (CPU time)", "on the GPU (CUDA events)", "cuda:0 busy"] {
        assert!(html.contains(shown), "{shown} in {html}");
    }
}

#[test]
fn a_large_op_is_queued_without_waiting_unless_the_profile_blocks() {
    let _serial = serial();
    let a = warm_square(768);
    // By default the host queues the GEMM and goes on: its host time is a small part of the
    // GPU's (the emulated GEMM runs on the CPU, tens of milliseconds).
    let p = profile::profile(|| a.matmul(&a));
    let op = &p.ops()[0];
    let gpu = op.gpu_time.expect("a GPU time");
    assert!(op.measured < gpu / 2, "{op:?}");
    assert!(!p.blocking());
    // Blocking, the op waits for its work: its host time includes its GPU time.
    let (waits, p) = waits_in(|| profile::profile_blocking(|| a.matmul(&a)?.relu()));
    assert!(p.blocking());
    assert_eq!(p.ops().len(), 2, "{}", p.text());
    assert!(waits >= 2, "each op waited: {waits} waits");
    for op in p.ops() {
        let gpu = op.gpu_time.expect("a GPU time");
        assert!(op.measured >= gpu, "{op:?}");
    }
    let text = p.text();
    assert!(text.contains("CUDA_LAUNCH_BLOCKING=1"), "{text}");
    // The next profile does not block.
    assert!(!profile::profile(|| a.relu()).blocking());
}

#[test]
fn a_failing_profiled_step_still_reads_its_ops_gpu_times() {
    let _serial = serial();
    let a = warm_square(256);
    let events = emulated::live_events();
    // An error: the ops before it (and the one that failed its checks) are recorded, the GPU
    // work they queued timed.
    let p = profile::profile(|| {
        let b = a.matmul(&a)?.relu()?;
        b.matmul(&Tensor::randn([3, 5], GPU)?)
    });
    assert!(p.failure().unwrap().contains("matmul"), "{:?}", p.failure());
    let names: Vec<Op> = p.ops().iter().map(|o| o.op).collect();
    assert_eq!(
        names[..2],
        [Op::Matmul, Op::Unary(placelab::op::UnaryOp::Relu)],
        "{}",
        p.text()
    );
    for op in &p.ops()[..2] {
        assert!(op.gpu_time.is_some(), "{op:?}");
    }
    // A panic too.
    let p = profile::profile(|| -> placelab::Result<()> {
        drop(a.matmul(&a)?);
        panic!("boom")
    });
    assert_eq!(p.failure(), Some("panicked: boom"));
    assert!(p.ops()[0].gpu_time.is_some(), "{}", p.text());
    assert_eq!(
        emulated::live_events(),
        events,
        "no event outlives its profile"
    );
}

#[test]
fn a_long_profile_reads_its_reached_events_as_it_goes() {
    let _serial = serial();
    cuda::emulate(1, None).unwrap();
    let a = Tensor::randn([16], GPU).unwrap();
    cuda::synchronize(0).unwrap();
    let events = emulated::live_events();
    // Beyond 1024 ops pending, those the stream has reached are read and their events
    // destroyed as the code goes on (here the stream is never far behind): a long profile holds
    // at most about 1024 pairs, not one per op.
    let p = profile::profile(|| {
        for i in 0..2100 {
            drop(a.relu()?);
            if i % 100 == 99 {
                cuda::synchronize(0)?;
            }
            let held = emulated::live_events().saturating_sub(events);
            assert!(held <= 2 * 1025, "{held} events held after {} ops", i + 1);
        }
        Ok(())
    });
    assert_eq!(p.failure(), None);
    assert_eq!(p.ops().len(), 2100);
    assert!(p.ops().iter().all(|o| o.gpu_time.is_some()));
    assert_eq!(emulated::live_events(), events);
}
