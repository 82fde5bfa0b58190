//! The session driven as a user would, through `placelab run-script` on a simulated GPU: cards,
//! memory lines, a device mismatch, `:del`, magics, compile errors, panics, out-of-memory — and
//! one allocator shared by every cell.
//!
//! The first run on a machine compiles the engine inside evcxr (minutes); the compile directory
//! is kept under `target/` so later runs take seconds.

use std::process::Command;

const CACHE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/target/placelab-session-cache");

fn run_script(name: &str) -> (String, bool) {
    let cache = CACHE;
    let script = format!("{}/tests/scripts/{name}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(env!("CARGO_BIN_EXE_placelab"))
        .args(["run-script", &script])
        .env("PLACELAB_CACHE", cache)
        .env("PLACELAB_SIMULATE_CUDA", "1")
        .output()
        .expect("placelab runs");
    let text = format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (text, out.status.success())
}

fn expect(text: &str, what: &[&str]) {
    for w in what {
        assert!(
            text.contains(w),
            "missing {w:?} in the session output:\n{text}"
        );
    }
}

/// The tests here share one compile cache: one session at a time, so none rebuilds the engine.
fn one_session_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn first_steps_through_the_session() {
    let _one = one_session_at_a_time();
    let (out, ok) = run_script("first_steps.plrs");
    assert!(
        !ok,
        "the script has failing cells on purpose, so the exit status is 1:\n{out}"
    );
    expect(
        &out,
        &[
            // Devices and .to(), with cards and memory lines.
            "\n.. device\ncuda:0\n",
            "Tensor f32[1000, 1000] · cuda:0 (simulated) · 3.81 MiB · last .to(): cpu → cuda:0, ",
            "── cpu allocated 3.81 MiB (1 tensor) · reserved 20.00 MiB",
            "── cuda:0 (simulated) allocated 3.81 MiB (1 tensor) · reserved 20.00 MiB · free 15.98 GiB / 16.00 GiB · this cell +3.81 MiB",
            "── 1 transfer this cell: 3.81 MiB in ",
            // The mismatch, as a value and as an error.
            "true",
            // A last `let` without its `;` still defines the variable.
            ">> y_again.numel()\n1000000",
            "device mismatch in add: `self` is on cpu but `other` is on cuda:0.",
            // :del and friends, reading the same allocator the cells use.
            "freed y: 3.81 MiB on cuda:0 (simulated) (kept in the cache: reserved stays 20.00 MiB; `:empty_cache` releases it)",
            "cuda:0 (simulated)            0 B    20.00 MiB",
            "released 20.00 MiB of cached memory back to the devices",
            "error: no variable `nope` in this session; defined: ",
            // Compile errors with the user's line, panics and OOM keep the session going.
            "error[E0308]: mismatched types",
            " --> cell:1:16",
            "error: panic in the cell (variables defined before it are kept):\n       boom",
            "[1000, 1000]",
            "out of memory on cuda:0: tried to allocate 20.00 GiB but only",
            // The log of transfers, and an unknown command.
            "#1         cpu → cuda:0       3.81 MiB",
            "error: Unrecognised command :frobnicate",
            "transfers.svg (open it in a browser)",
            " threads)\ncuda:0 (simulated) on host memory, 16.00 GiB",
            // Two cards from one cell.
            ">> x.narrow(0, 0, 2)?.show();\n.. x.narrow(0, 2, 2)?.show();\nTensor f32[2, 1000] · cpu · 7.81 KiB (view of 3.81 MiB) · no .to() yet",
            "memory.svg (open it in a browser)",
            // `:fmt` reaches both ways a value is shown: a temporary (printed by the prelude's
            // `ShowDebug` in one compile) and a variable (printed by evcxr's fallback).
            "values now print with {:.3?}",
            "([1.260, 2.500], \"cell\")",
            ">> w\n[0.250, 1.000]",
            "(\n    1,\n    2,\n)",
            "error: `:fmt` takes a Debug format: {:?}, {:#?}, or either with a precision such as {:.3?}; got `{}` (values still print with {:#?})",
            ">> (3, 4)\n(3, 4)",
        ],
    );
    assert!(
        !out.contains("stack backtrace"),
        "panics are shown without evcxr's backtrace:\n{out}"
    );
    assert!(
        !out.contains("evcxr_"),
        "no evcxr-internal name reaches the user:\n{out}"
    );
}

/// A second session started while the first stays open (a second notebook) gets its own compile
/// directory, seeded from the warm one: it reaches its first result without rebuilding the engine.
#[test]
fn a_second_session_beside_an_open_one_starts_warm() {
    use std::io::Write;
    let _one = one_session_at_a_time();
    let cache = std::path::Path::new(CACHE);
    // The engine is built in some slot (a warm machine)…
    let (out, ok) = run_script("one_cell.plrs");
    assert!(ok, "{out}");
    // …and every other slot is gone, so the next session claims a fresh one.
    let sessions = cache.join("sessions");
    for e in std::fs::read_dir(&sessions).unwrap().flatten() {
        if e.file_name() != "session-0" {
            std::fs::remove_dir_all(e.path()).unwrap();
        }
    }
    // The first session holds slot 0 for as long as it runs (the REPL, waiting for input).
    let mut first = Command::new(env!("CARGO_BIN_EXE_placelab"))
        .env("PLACELAB_CACHE", CACHE)
        .env("PLACELAB_SIMULATE_CUDA", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the REPL starts");
    let lock = std::fs::File::open(sessions.join("session-0/.lock")).unwrap();
    let claimed = (0..200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        // SAFETY: a non-blocking flock probe on a file we opened.
        let free = unsafe {
            libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&lock),
                libc::LOCK_EX | libc::LOCK_NB,
            )
        } == 0;
        if free {
            // SAFETY: releasing the probe's lock at once.
            unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_UN) };
        }
        !free
    });
    assert!(claimed, "the first session claims session-0");
    let (out, ok) = run_script("one_cell.plrs");
    let _ = first.stdin.take().map(|mut i| i.write_all(b":exit\n"));
    let _ = first.wait();
    assert!(ok, "{out}");
    expect(&out, &["Tensor f32[3] · cpu · 12 B"]);
    assert!(
        !out.contains("compiling placelab") && !out.contains("compiling gemm"),
        "the second session rebuilt the engine instead of starting from the warm build:\n{out}"
    );
    assert!(
        sessions.join("session-1/work/target").exists(),
        "the second session ran in a slot of its own"
    );
}

/// `:simulate cuda 2 --emulate` in a session: the cells run the CUDA backend and the real
/// kernels, compiled for the host inside the engine every cell links, and say so everywhere.
#[test]
fn emulated_devices_through_the_session() {
    let _one = one_session_at_a_time();
    let (out, ok) = run_script("emulated.plrs");
    assert!(ok, "every cell runs:\n{out}");
    expect(
        &out,
        &[
            "2 emulated CUDA device(s), the real kernels run on the CPU on host memory: cuda:0 … cuda:1",
            "Tensor f32[1000, 1000] · cuda:0 (emulated) · 3.81 MiB · last .to(): cpu → cuda:0, ",
            "emulated: host copy time",
            "── cuda:0 (emulated) allocated 3.81 MiB (1 tensor)",
            // Softmax rows sum to 1: a thousand rows, through the kernels' barriers.
            "true",
            "cuda:0 (emulated) kernels/*.cu on the CPU, host memory, 16.00 GiB",
        ],
    );
}
