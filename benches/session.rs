//! The REPL's latency targets, measured through the same `Session` the REPL uses, beside plain
//! evcxr in the same run (no dependency; it reads the same `evcxr.toml`, so dylib mode and cells
//! at opt 0): evcxr start, the rust-analyzer warm-up, the first cell's result, a trivial cell,
//! a cell with no value, and the magics that compile nothing. `cargo bench --bench session`
//! (the first run compiles the engine: minutes).

use std::sync::Arc;
use std::time::{Duration, Instant};

use placelab::frontend::{session, setup};

/// The median time of `n` runs of `cell`.
fn median_of(n: usize, mut cell: impl FnMut()) -> Duration {
    let mut v: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            cell();
            t.elapsed()
        })
        .collect();
    v.sort();
    v[n / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    // This binary is also evcxr's cell runner and rustc wrapper.
    setup::hooks();
    let prepared = session::prepare("bench").expect("a compile directory");
    let quiet: session::Sink = Arc::new(|_, _| {});
    let t = Instant::now();
    let mut s = session::Session::start(prepared, quiet.clone()).expect("the session starts");
    println!(
        "placelab: session start (evcxr + engine preload, warm) {}",
        ms(t.elapsed())
    );
    let t = Instant::now();
    s.warm_up();
    println!(
        "placelab: rust-analyzer warm-up (the front ends run it while the user types) {}",
        ms(t.elapsed())
    );
    let t = Instant::now();
    let r = s.execute("let x = Tensor::randn([1000, 1000], &Device::Cpu)?;\nx.shape().to_vec()");
    assert!(r.ok(), "{r:?}");
    println!("placelab: first cell result {}", ms(t.elapsed()));
    let trivial = median_of(15, || {
        assert!(s.execute("x.shape().to_vec()").ok());
    });
    println!(
        "placelab: trivial cell `x.shape()` median of 15: {}",
        ms(trivial)
    );
    let statement = median_of(15, || {
        assert!(s.execute("x.shape();").ok());
    });
    println!(
        "placelab: statement cell `x.shape();` (no value) median of 15: {}",
        ms(statement)
    );
    for magic in [":mem", ":transfers", ":empty_cache"] {
        let v = median_of(50, || {
            assert!(s.execute(magic).ok());
        });
        println!("placelab: {magic} median of 50: {}", ms(v));
    }
    let devices = median_of(5, || {
        assert!(s.execute(":devices").ok());
    });
    println!(
        "placelab: :devices (asks the cell process, compiles a cell) median of 5: {}",
        ms(devices)
    );
    drop(s);

    // Plain evcxr in the same run: no dependency, the same evcxr.toml.
    let t = Instant::now();
    let (mut ctx, _out) = evcxr::CommandContext::new().expect("plain evcxr starts");
    println!("plain evcxr: start {}", ms(t.elapsed()));
    let t = Instant::now();
    ctx.execute("let v = vec![1000usize, 1000];\nv.clone()")
        .expect("a cell");
    println!("plain evcxr: first cell result {}", ms(t.elapsed()));
    let trivial = median_of(15, || {
        ctx.execute("v.clone()").expect("a cell");
    });
    println!("plain evcxr: trivial cell median of 15: {}", ms(trivial));
    let statement = median_of(15, || {
        ctx.execute("v.len();").expect("a cell");
    });
    println!(
        "plain evcxr: statement cell `v.len();` (no value) median of 15: {}",
        ms(statement)
    );
}
