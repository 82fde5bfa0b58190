//! The engine's CPU benchmark: the workloads of `benches/torch_peer.py`, timed the same way
//! (one warm-up, then at least 10 repetitions and about 1 s; the median is the figure).
//!
//! `cargo bench --bench engine [-- --quick] [-- --only a,b]` prints one JSON object a line;
//! `benches/compare.sh` runs this and the PyTorch peer and prints the ratios. `-- --ceilings`
//! prints this machine's ceilings; `-- --beside-ceilings` measures, just before each workload,
//! the ceiling that bounds it, and adds it to the workload's line (what `benches/guard.py` reads).

use std::hint::black_box;
use std::time::{Duration, Instant};

use placelab::prelude::*;

type Setup = Box<dyn Fn() -> Box<dyn FnMut()>>;

/// What one repetition of a workload must do at least: floating-point operations for products
/// and training steps, bytes read and written once for the memory-bound rest. Its rate against
/// this machine's ceiling (`--ceilings`) is what `benches/guard.py` holds to a floor.
#[derive(Clone, Copy)]
enum Work {
    Flop(f64),
    Bytes(f64),
}

impl Work {
    fn json(self) -> String {
        match self {
            Work::Flop(n) => format!("\"flop\": {n}"),
            Work::Bytes(n) => format!("\"bytes\": {n}"),
        }
    }
}

/// The 784-128-10 MLP step's floating-point operations at `batch`: the forward products, each
/// layer's weight gradient, and the second layer's input gradient (the first layer's input needs
/// none).
fn mlp_flop(batch: usize) -> Work {
    Work::Flop((2 * batch * (784 * 128 * 2 + 128 * 10 * 3)) as f64)
}

fn workloads() -> Vec<(&'static str, Work, Setup)> {
    let cpu = Device::Cpu;
    let ten_m = move |f: fn(&Tensor) -> Result<Tensor>| -> Setup {
        Box::new(move || {
            let a = Tensor::randn([10_000_000], cpu).unwrap();
            Box::new(move || drop(black_box(f(&a).unwrap())))
        })
    };
    let matmul = move |n: usize| -> Setup {
        Box::new(move || {
            let (a, b) = (
                Tensor::randn([n, n], cpu).unwrap(),
                Tensor::randn([n, n], cpu).unwrap(),
            );
            Box::new(move || drop(black_box(a.matmul(&b).unwrap())))
        })
    };
    vec![
        ("matmul_1000", Work::Flop(2e9), matmul(1000)),
        (
            "matmul_2048",
            Work::Flop(2.0 * 2048f64.powi(3)),
            matmul(2048),
        ),
        (
            "add_10m",
            Work::Bytes(120e6),
            Box::new(move || {
                let (a, b) = (
                    Tensor::randn([10_000_000], cpu).unwrap(),
                    Tensor::randn([10_000_000], cpu).unwrap(),
                );
                Box::new(move || drop(black_box((&a + &b).unwrap())))
            }),
        ),
        ("relu_10m", Work::Bytes(80e6), ten_m(|a| a.relu())),
        ("exp_10m", Work::Bytes(80e6), ten_m(|a| a.exp())),
        ("sum_10m", Work::Bytes(40e6), ten_m(|a| a.sum_all())),
        (
            "softmax_1000x1000",
            Work::Bytes(8e6),
            Box::new(move || {
                let a = Tensor::randn([1000, 1000], cpu).unwrap();
                Box::new(move || drop(black_box(a.softmax(1).unwrap())))
            }),
        ),
        (
            "randn_1000x1000",
            Work::Bytes(4e6),
            Box::new(move || {
                Box::new(move || drop(black_box(Tensor::randn([1000, 1000], cpu).unwrap())))
            }),
        ),
        (
            "clone_400mb",
            Work::Bytes(800e6),
            Box::new(move || {
                let a = Tensor::randn([100_000_000], cpu).unwrap();
                Box::new(move || drop(black_box(a.copy().unwrap())))
            }),
        ),
        (
            "transpose_contig_2048",
            Work::Bytes(2048.0 * 2048.0 * 8.0),
            Box::new(move || {
                let a = Tensor::randn([2048, 2048], cpu).unwrap();
                Box::new(move || drop(black_box(a.t().unwrap().contiguous().unwrap())))
            }),
        ),
        (
            "to_f16_10m",
            Work::Bytes(60e6),
            ten_m(|a| a.to_dtype(DType::F16)),
        ),
        ("mlp_step_64", mlp_flop(64), mlp_step(64, false)),
        ("mlp_step_64_profiled", mlp_flop(64), mlp_step(64, true)),
        ("mlp_step_1024", mlp_flop(1024), mlp_step(1024, false)),
    ]
}

/// One training step of the 784-128-10 MLP: forward, cross-entropy, backward, SGD; `profiled`:
/// inside `profile(|| …)`, recording every op and block (what recording costs).
fn mlp_step(batch: usize, profiled: bool) -> Setup {
    use placelab::nn::{CrossEntropyLoss, Linear, ReLU, Sequential};
    Box::new(move || {
        let cpu = Device::Cpu;
        let model = Sequential::new()
            .add(Linear::new(784, 128, cpu).unwrap())
            .add(ReLU)
            .add(Linear::new(128, 10, cpu).unwrap());
        let mut opt = Sgd::new(model.parameters(), 0.01).unwrap();
        let (x, y) = (
            Tensor::randn([batch, 784], cpu).unwrap(),
            Tensor::randint(0, 10, [batch], cpu).unwrap(),
        );
        Box::new(move || {
            let mut step = || {
                opt.zero_grad();
                let loss = CrossEntropyLoss.forward(&model.forward(&x)?, &y)?;
                loss.backward()?;
                opt.step()?;
                drop(black_box(loss));
                Ok(())
            };
            if profiled {
                let p = profile(step);
                assert!(p.failure().is_none(), "{}", p.text());
                drop(black_box(p.rows()));
            } else {
                step().unwrap();
            }
        })
    })
}

/// This machine's f32 FMA peak (GFLOP/s) on every thread: eight independent accumulators per
/// thread, in the widest vectors the CPU has, the best of three runs of `iters` rounds each
/// ([`FULL_FMA_ROUNDS`]: about 0.3 s in all).
fn fma_peak_gflops(threads: usize, iters: u64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    fn run(iters: u64) -> f64 {
        use std::arch::x86_64::*;
        #[target_feature(enable = "avx512f")]
        fn zmm(iters: u64) -> f64 {
            let mut acc = [_mm512_set1_ps(0.0); 8];
            let (a, b) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
            for _ in 0..iters {
                for x in acc.iter_mut() {
                    *x = _mm512_fmadd_ps(*x, a, b);
                }
            }
            black_box(acc);
            (iters * 8 * 16 * 2) as f64
        }
        #[target_feature(enable = "avx2,fma")]
        fn ymm(iters: u64) -> f64 {
            let mut acc = [_mm256_set1_ps(0.0); 10];
            let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
            for _ in 0..iters {
                for x in acc.iter_mut() {
                    *x = _mm256_fmadd_ps(*x, a, b);
                }
            }
            black_box(acc);
            (iters * 10 * 8 * 2) as f64
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            unsafe { zmm(iters) }
        } else if std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA.
            unsafe { ymm(iters) }
        } else {
            0.0
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    fn run(_: u64) -> f64 {
        0.0
    }
    (0..3)
        .map(|_| {
            let t = Instant::now();
            let flops: f64 = std::thread::scope(|s| {
                let hs: Vec<_> = (0..threads).map(|_| s.spawn(|| run(iters))).collect();
                hs.into_iter().map(|h| h.join().unwrap()).sum()
            });
            flops / t.elapsed().as_secs_f64() / 1e9
        })
        .fold(0.0, f64::max)
}

/// This machine's memory read bandwidth (GB/s) on every thread: the best of `passes` sums over
/// `data` (512 MiB, far past every cache).
fn memory_read_gbps(threads: usize, data: &[f32], passes: usize) -> f64 {
    let part = data.len().div_ceil(threads);
    (0..passes)
        .map(|_| {
            let t = Instant::now();
            std::thread::scope(|s| {
                for chunk in data.chunks(part) {
                    s.spawn(move || {
                        let mut lanes = [0.0f32; 64];
                        for c in chunk.chunks_exact(64) {
                            for i in 0..64 {
                                lanes[i] += c[i];
                            }
                        }
                        black_box(lanes);
                    });
                }
            });
            (data.len() * 4) as f64 / t.elapsed().as_secs_f64() / 1e9
        })
        .fold(0.0, f64::max)
}

/// FMA rounds a thread runs per measurement of the peak: 40M, about 0.1 s, for `--ceilings`; a
/// tenth of that beside each workload.
const FULL_FMA_ROUNDS: u64 = 40_000_000;

/// The memory-read buffer: 512 MiB of f32.
const READ_BUFFER_FLOATS: usize = 128 << 20;

/// The ceiling that bounds `work`, measured now (`--beside-ceilings`): the FMA peak in GFLOP/s for
/// products and steps, the memory read bandwidth in GB/s for the rest. Measured just before the
/// workload, it meets the same load on a busy machine as the workload does, so the two move
/// together (`benches/guard.py` divides one by the other).
fn ceiling_beside(work: Work, threads: usize, buffer: &mut Option<Vec<f32>>) -> f64 {
    match work {
        Work::Flop(_) => fma_peak_gflops(threads, FULL_FMA_ROUNDS / 10),
        Work::Bytes(_) => {
            let data = buffer.get_or_insert_with(|| vec![1.0f32; READ_BUFFER_FLOATS]);
            memory_read_gbps(threads, data, 3)
        }
    }
}

/// Times one workload: a warm-up, then at least `min_reps` repetitions (and, unless `quick`,
/// about 1 s); the times sorted.
fn time_workload(setup: &Setup, quick: bool) -> Vec<Duration> {
    let mut run = setup();
    run(); // warm-up: fills the allocator's cache, as PyTorch's warm-up does
    let mut times: Vec<Duration> = Vec::new();
    let started = Instant::now();
    let min_reps = if quick { 3 } else { 10 };
    while times.len() < min_reps
        || (!quick && started.elapsed() < Duration::from_secs(1) && times.len() < 10_000)
    {
        let t = Instant::now();
        run();
        times.push(t.elapsed());
    }
    times.sort();
    times
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads = placelab::cpu::threads();
    if args.iter().any(|a| a == "--ceilings") {
        let data = vec![1.0f32; READ_BUFFER_FLOATS];
        println!(
            "{{\"threads\": {threads}, \"fma_peak_gflops\": {:.1}, \"memory_read_gbps\": {:.1}}}",
            fma_peak_gflops(threads, FULL_FMA_ROUNDS),
            memory_read_gbps(threads, &data, 5)
        );
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let beside = args.iter().any(|a| a == "--beside-ceilings");
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.split(',').map(String::from).collect());
    let mut buffer = None;
    for (name, work, setup) in workloads() {
        if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == name)) {
            continue;
        }
        let ceiling = beside.then(|| ceiling_beside(work, threads, &mut buffer));
        let times = time_workload(&setup, quick);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let ceiling = ceiling.map_or(String::new(), |c| format!(", \"ceiling\": {c:.1}"));
        println!(
            "{{\"name\": \"{name}\", \"median_ms\": {:.4}, \"min_ms\": {:.4}, \"reps\": {}, {}{ceiling}, \"peer\": \"placelab {}\"}}",
            ms(times[times.len() / 2]),
            ms(times[0]),
            times.len(),
            work.json(),
            env!("CARGO_PKG_VERSION")
        );
    }
}
