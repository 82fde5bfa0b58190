//! Compares f32 GEMM crates for placelab: row-major C = A·B on square sizes,
//! 2 threads, runs interleaved round by round so machine noise hits every
//! crate alike. Prints median ms, GFLOP/s and accuracy against gemm (and
//! against an f64 reference).
//!
//! gemm with and without its `x86-v4` feature can't live in one build (cargo
//! unifies features), so the default build (with `x86-v4`) builds a second
//! copy of itself without it into `target/no-x86-v4` and drives it as a child
//! process over a pipe: `--worker` mode. The child times its own call, so the
//! pipe round trip is not counted.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use rayon::prelude::*;

/// (n, timed rounds): small sizes are cheap, so they get more rounds to
/// steady their medians; every size gets at least 15.
const SIZES: [(usize, usize); 3] = [(256, 201), (1000, 41), (2048, 21)];
const THREADS: usize = 2;
const WARMUP_ROUNDS: usize = 3;
const SEED_A: u64 = 0x5eed_0a0a;
const SEED_B: u64 = 0x5eed_0b0b;

// ---------------------------------------------------------------- inputs --

/// splitmix64, mapped to f32 in [-1, 1).
fn random_matrix(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    (0..n * n)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

// ----------------------------------------------------------- the kernels --

/// Row-major n×n: C = A·B via gemm 0.19 (C is overwritten, not read).
fn run_gemm(n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    assert!(a.len() == n * n && b.len() == n * n && c.len() == n * n);
    let s = n as isize;
    // gemm's convention: dst = alpha·dst + beta·lhs·rhs; read_dst=false drops alpha.
    unsafe {
        gemm::gemm(
            n,
            n,
            n,
            c.as_mut_ptr(),
            1,
            s,
            false,
            a.as_ptr(),
            1,
            s,
            b.as_ptr(),
            1,
            s,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::Rayon(THREADS),
        );
    }
}

/// Row-major n×n: C = A·B via matrixmultiply 0.3 (threads from MATMUL_NUM_THREADS).
fn run_matrixmultiply(n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    assert!(a.len() == n * n && b.len() == n * n && c.len() == n * n);
    let s = n as isize;
    unsafe {
        matrixmultiply::sgemm(
            n,
            n,
            n,
            1.0,
            a.as_ptr(),
            s,
            1,
            b.as_ptr(),
            s,
            1,
            0.0,
            c.as_mut_ptr(),
            s,
            1,
        );
    }
}

/// Row-major n×n: C = A·B via faer 0.24.
fn run_faer(n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    let lhs = faer::MatRef::from_row_major_slice(a, n, n);
    let rhs = faer::MatRef::from_row_major_slice(b, n, n);
    let dst = faer::MatMut::from_row_major_slice_mut(c, n, n);
    faer::linalg::matmul::matmul(
        dst,
        faer::Accum::Replace,
        lhs,
        rhs,
        1.0f32,
        faer::Par::rayon(THREADS),
    );
}

/// f64 reference, i-k-j order, rows split over the rayon pool.
fn reference_f64(n: usize, a: &[f32], b: &[f32]) -> Vec<f64> {
    let b64: Vec<f64> = b.iter().map(|&x| x as f64).collect();
    let mut c = vec![0.0f64; n * n];
    c.par_chunks_mut(n).enumerate().for_each(|(i, row)| {
        for k in 0..n {
            let aik = a[i * n + k] as f64;
            let brow = &b64[k * n..(k + 1) * n];
            for (cj, bj) in row.iter_mut().zip(brow) {
                *cj += aik * bj;
            }
        }
    });
    c
}

// ---------------------------------------------------- the gemm-avx2 child --

/// `--worker`: reads commands on stdin, one a line.
///   `init N` -> builds the same A, B as the parent, answers `ok`
///   `run`    -> one gemm call, answers its time in ns
///   `dump`   -> writes C as N·N little-endian f32 bytes
fn worker_main() {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let (mut n, mut a, mut b, mut c) = (0usize, Vec::new(), Vec::new(), Vec::new());
    for line in stdin.lock().lines() {
        let line = line.expect("worker: read stdin");
        let mut words = line.split_whitespace();
        match words.next() {
            Some("init") => {
                n = words.next().and_then(|w| w.parse().ok()).expect("init N");
                a = random_matrix(n, SEED_A);
                b = random_matrix(n, SEED_B);
                c = vec![0.0f32; n * n];
                writeln!(out, "ok").unwrap();
            }
            Some("run") => {
                let t = Instant::now();
                run_gemm(n, &a, &b, &mut c);
                let ns = t.elapsed().as_nanos();
                writeln!(out, "{ns}").unwrap();
            }
            Some("dump") => {
                let bytes: Vec<u8> = c.iter().flat_map(|x| x.to_le_bytes()).collect();
                out.write_all(&bytes).unwrap();
            }
            Some("quit") | None => break,
            Some(other) => panic!("worker: unknown command {other:?}"),
        }
        out.flush().unwrap();
    }
}

struct Worker {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
}

impl Worker {
    fn ask(&mut self, cmd: &str) -> String {
        writeln!(self.to, "{cmd}").unwrap();
        self.to.flush().unwrap();
        let mut line = String::new();
        self.from.read_line(&mut line).expect("worker reply");
        assert!(!line.is_empty(), "worker exited early");
        line.trim().to_string()
    }

    fn init(&mut self, n: usize) {
        assert_eq!(self.ask(&format!("init {n}")), "ok");
    }

    fn run_ns(&mut self) -> u128 {
        self.ask("run").parse().expect("worker time")
    }

    fn dump(&mut self, n: usize) -> Vec<f32> {
        writeln!(self.to, "dump").unwrap();
        self.to.flush().unwrap();
        let mut bytes = vec![0u8; n * n * 4];
        self.from.read_exact(&mut bytes).expect("worker dump");
        bytes
            .chunks_exact(4)
            .map(|w| f32::from_le_bytes(w.try_into().unwrap()))
            .collect()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = writeln!(self.to, "quit");
        let _ = self.to.flush();
        let _ = self.child.wait();
    }
}

/// Builds this package without default features into target/no-x86-v4 and
/// starts it in worker mode. None (with a note) if that fails.
fn spawn_avx2_worker() -> Option<Worker> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target = dir.join("target").join("no-x86-v4");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("building gemm without x86-v4 into {} ...", target.display());
    let status = Command::new(&cargo)
        .args([
            "build",
            "--release",
            "--no-default-features",
            "--manifest-path",
        ])
        .arg(dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .stdout(Stdio::null())
        .status();
    if !matches!(status, Ok(s) if s.success()) {
        eprintln!("note: could not build the no-x86-v4 worker; skipping gemm (AVX2)");
        return None;
    }
    let exe = target
        .join("release")
        .join(format!("gemm-crates{}", std::env::consts::EXE_SUFFIX));
    let mut child = Command::new(exe)
        .arg("--worker")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let to = child.stdin.take()?;
    let from = BufReader::new(child.stdout.take()?);
    Some(Worker { child, to, from })
}

// ------------------------------------------------------------- reporting --

fn median_ms(ns: &mut [u128]) -> f64 {
    ns.sort_unstable();
    let m = ns.len() / 2;
    let mid = if ns.len() % 2 == 1 {
        ns[m] as f64
    } else {
        (ns[m - 1] + ns[m]) as f64 / 2.0
    };
    mid / 1e6
}

/// max |x - r| / max |r|: normwise, so near-zero entries of C don't blow it up.
fn max_rel_diff<R: Copy + Into<f64>>(x: &[f32], r: &[R]) -> f64 {
    let scale = r.iter().map(|&v| v.into().abs()).fold(0.0f64, f64::max);
    let diff = x
        .iter()
        .zip(r)
        .map(|(&v, &w)| (v as f64 - w.into()).abs())
        .fold(0.0f64, f64::max);
    diff / scale
}

// ------------------------------------------------------------------ main --

#[derive(Clone, Copy, PartialEq)]
enum Who {
    GemmHere,
    GemmAvx2Child,
    MatrixMultiply,
    Faer,
}

fn label(who: Who) -> &'static str {
    match who {
        Who::GemmHere if cfg!(feature = "x86-v4") => "gemm 0.19 +x86-v4",
        Who::GemmHere => "gemm 0.19 (no x86-v4)",
        Who::GemmAvx2Child => "gemm 0.19 (no x86-v4)",
        Who::MatrixMultiply => "matrixmultiply 0.3 +threading",
        Who::Faer => "faer 0.24 Par::rayon(2)",
    }
}

fn main() {
    if std::env::args().any(|a| a == "--worker") {
        // SAFETY: still single-threaded; set before any pool exists.
        unsafe { std::env::set_var("MATMUL_NUM_THREADS", THREADS.to_string()) };
        rayon::ThreadPoolBuilder::new()
            .num_threads(THREADS)
            .build_global()
            .unwrap();
        return worker_main();
    }

    // matrixmultiply reads MATMUL_NUM_THREADS once, on first use; unset it
    // defaults to the physical core count, which is 1 on a 2-vCPU VM.
    // SAFETY: no other thread exists yet.
    unsafe { std::env::set_var("MATMUL_NUM_THREADS", THREADS.to_string()) };
    rayon::ThreadPoolBuilder::new()
        .num_threads(THREADS)
        .build_global()
        .unwrap();

    let mut worker = if cfg!(feature = "x86-v4") {
        spawn_avx2_worker()
    } else {
        None
    };

    let mut crates = vec![Who::GemmHere];
    if worker.is_some() {
        crates.push(Who::GemmAvx2Child);
    }
    crates.extend([Who::MatrixMultiply, Who::Faer]);

    println!(
        "gemm-crates: f32 row-major C = A·B, {THREADS} threads, {WARMUP_ROUNDS} warm-up rounds, \
         timed rounds (n:rounds) {:?}, interleaved; avx512f detected: {}; available_parallelism: {}",
        SIZES,
        is_x86_feature_detected!("avx512f"),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
    );
    println!();
    println!(
        "| size | crate | median ms | min ms | GFLOP/s (median) | max rel diff vs gemm | max rel diff vs f64 |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");

    for &(n, reps) in &SIZES {
        let a = random_matrix(n, SEED_A);
        let b = random_matrix(n, SEED_B);
        let mut outs: Vec<Vec<f32>> = crates.iter().map(|_| vec![0.0f32; n * n]).collect();
        let mut times: Vec<Vec<u128>> = crates.iter().map(|_| Vec::with_capacity(reps)).collect();
        if let Some(w) = worker.as_mut() {
            w.init(n);
        }

        for round in 0..WARMUP_ROUNDS + reps {
            for (i, &who) in crates.iter().enumerate() {
                let c = &mut outs[i];
                let ns = match who {
                    Who::GemmAvx2Child => worker.as_mut().unwrap().run_ns(),
                    _ => {
                        let t = Instant::now();
                        match who {
                            Who::GemmHere => run_gemm(n, &a, &b, c),
                            Who::MatrixMultiply => run_matrixmultiply(n, &a, &b, c),
                            Who::Faer => run_faer(n, &a, &b, c),
                            Who::GemmAvx2Child => unreachable!(),
                        }
                        t.elapsed().as_nanos()
                    }
                };
                std::hint::black_box(&c);
                if round >= WARMUP_ROUNDS {
                    times[i].push(ns);
                }
            }
        }

        if let Some(i) = crates.iter().position(|&w| w == Who::GemmAvx2Child) {
            outs[i] = worker.as_mut().unwrap().dump(n);
        }
        let exact = reference_f64(n, &a, &b);
        let flop = 2.0 * (n as f64).powi(3);
        for (i, &who) in crates.iter().enumerate() {
            let med = median_ms(&mut times[i]);
            let min = times[i][0] as f64 / 1e6;
            println!(
                "| {n}³ | {} | {med:.2} | {min:.2} | {:.1} | {:.1e} | {:.1e} |",
                label(who),
                flop / (med * 1e6),
                max_rel_diff(&outs[i], &outs[0]),
                max_rel_diff(&outs[i], &exact),
            );
        }
    }
    drop(worker);
}
