//! The session driven as a user would, through `placelab run-script` on a simulated GPU: cards,
//! memory lines, a device mismatch, `:del`, magics, compile errors, panics, out-of-memory — and
//! one allocator shared by every cell.
//!
//! The first run on a machine compiles the engine inside evcxr (minutes); the compile directory
//! is kept under `target/` so later runs take seconds.

use std::process::Command;

#[path = "support/fake_cuda.rs"]
mod fake_cuda;
#[path = "support/skipped.rs"]
mod skipped;
#[path = "support/user_env.rs"]
mod user_env;
use user_env::user_command;

const CACHE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/target/placelab-session-cache");

fn run_script(name: &str) -> (String, bool) {
    run_script_at(&format!(
        "{}/tests/scripts/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

fn run_script_at(script: &str) -> (String, bool) {
    run_script_with(script, &[])
}

/// `run_script_at` with more settings (`env` after the defaults, so it can replace them).
fn run_script_with(script: &str, env: &[(&str, &str)]) -> (String, bool) {
    let cache = CACHE;
    let out = user_command(env!("CARGO_BIN_EXE_placelab"))
        .args(["run-script", script])
        .env("PLACELAB_CACHE", cache)
        .env("PLACELAB_SIMULATE_CUDA", "1")
        .envs(env.iter().copied())
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

/// `dir/engine`: a copy of the engine a session of the shared test cache built and published
/// (a session runs first, to make sure it is there and fresh).
fn copy_of_this_machines_engine(dir: &std::path::Path) -> std::path::PathBuf {
    let (out, ok) = run_script("one_cell.plrs");
    assert!(ok, "the test cache's engine is built:\n{out}");
    let engine = dir.join("engine");
    let copied = Command::new("cp")
        .args(["-a", "--reflink=auto"])
        .arg(std::path::Path::new(CACHE).join("engine"))
        .arg(&engine)
        .status();
    assert!(copied.unwrap().success());
    engine
}

/// The tests here share one compile cache: one session at a time, so none rebuilds the engine.
fn one_session_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn a_restarted_cell_process_has_the_gpus_simulate_made() {
    let _one = one_session_at_a_time();
    let (out, ok) = run_script("restart.plrs");
    assert!(
        !ok,
        "the aborting cell fails, so the exit status is 1:\n{out}"
    );
    expect(
        &out,
        &[
            "every variable was lost (t) and device memory freed",
            "`:simulate`'s devices were made again, empty.",
            // Two devices of 8 GiB, as `:simulate` asked (PLACELAB_SIMULATE_CUDA says 1 of
            // 16 GiB), holding nothing.
            "(2, 8, 0)",
        ],
    );
}

/// A kernel of a class sharing one GPU: its share capped, its cache given back when idle.
#[test]
fn a_class_gpu_caps_each_kernel_and_gives_an_idle_cache_back() {
    let _one = one_session_at_a_time();
    let script = format!(
        "{}/tests/scripts/class_gpu.plrs",
        env!("CARGO_MANIFEST_DIR")
    );
    let (out, ok) = run_script_with(
        &script,
        &[
            ("PLACELAB_SIMULATE_CUDA", "1,1GiB"),
            ("PLACELAB_CUDA_MEMORY_FRACTION", "0.25"),
            ("PLACELAB_IDLE_EMPTY_CACHE", "1"),
        ],
    );
    assert!(
        !ok,
        "the cell past the cap fails, so the exit status is 1:\n{out}"
    );
    expect(
        &out,
        &[
            "\n0.25\n",
            "tried to allocate 300.00 MiB, past this process's cap of 256.00 MiB (0.25 of the device's 1.00 GiB",
            "── cuda:0 gave back its 20.00 MiB cache after ",
            " idle (PLACELAB_IDLE_EMPTY_CACHE)",
            // The last cell's value: nothing reserved once the cache went back.
            "\n0\n",
        ],
    );
}

/// `placelab devices` on a machine with a CUDA 12.8 driver and both majors' libraries (13's
/// found first): the engine is built for CUDA 12, with the libraries of 12 it names; with a
/// CUDA 13 driver, for 13.
#[test]
fn devices_names_the_cuda_major_the_driver_and_libraries_allow() {
    let root = std::env::temp_dir().join(format!("placelab-fake-majors-{}", std::process::id()));
    let cu13 = fake_cuda::libraries(&root, (13, 0));
    let cu12 = fake_cuda::libraries(&root, (12, 8));
    let both = std::env::join_paths([&cu13, &cu12]).unwrap();
    let devices = |driver: (u32, u32)| {
        let driver = fake_cuda::driver(&root, driver);
        let out = user_command(env!("CARGO_BIN_EXE_placelab"))
            .arg("devices")
            .env("PLACELAB_CACHE", root.join("cache"))
            .env("LD_LIBRARY_PATH", &driver)
            .env("PLACELAB_CUDA_LIB_DIRS", &both)
            .output()
            .expect("placelab runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let on_12 = devices((12, 8));
    let on_13 = devices((13, 0));
    let _ = std::fs::remove_dir_all(&root);
    let built_for = |major: u32, libs: &std::path::Path, version: &str| {
        format!(
            "the engine is built for CUDA {major}: driver {}, NVRTC {version} ({}/libnvrtc.so.{major}), \
             cuBLAS {version} ({}/libcublas.so.{major}), cuBLASLt {version} ({}/libcublasLt.so.{major})",
            if major == 12 { "12.8" } else { "13.0" },
            libs.display(),
            libs.display(),
            libs.display()
        )
    };
    expect(&on_12, &[&built_for(12, &cu12, "12.8")]);
    expect(&on_13, &[&built_for(13, &cu13, "13.0")]);
}

/// A machine whose driver (CUDA 12.8) and libraries call for CUDA 12, with a CUDA 13
/// `libnvrtc.so` on the loader path besides (the name cudarc tries first): the session links to
/// this machine's CUDA 13 engine, compiles only the engine crate and cudarc again for CUDA 12,
/// and its cell process loads CUDA 12's NVRTC, the one chosen, not the other on the path.
#[test]
fn a_cuda_12_machine_gets_an_engine_for_cuda_12_that_loads_only_cuda_12s_libraries() {
    let _one = one_session_at_a_time();
    let root = std::env::temp_dir().join(format!("placelab-cuda-12-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let engine = copy_of_this_machines_engine(&root);
    let driver = fake_cuda::driver(&root, (12, 8));
    fake_cuda::unversioned_nvrtc(&driver, 13);
    let cu12 = fake_cuda::libraries(&root, (12, 8));
    let out = user_command(env!("CARGO_BIN_EXE_placelab"))
        .args([
            "run-script",
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scripts/devices.plrs"),
        ])
        .env("PLACELAB_CACHE", root.join("cache"))
        .env("PLACELAB_ENGINE", &engine)
        .env("LD_LIBRARY_PATH", &driver)
        .env("PLACELAB_CUDA_LIB_DIRS", &cu12)
        .output()
        .expect("placelab runs");
    let said = format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest = std::fs::read_to_string(engine.join("work/MANIFEST")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&root);
    assert!(out.status.success(), "{said}");
    expect(
        &said,
        &[
            "is for CUDA 13, and this machine's driver and libraries call for CUDA 12",
            "CUDA driver 12.8 · engine for CUDA 12 · NVRTC 12.8",
            "compiling cudarc",
            "compiling placelab",
        ],
    );
    assert!(
        !said.contains("compiling gemm"),
        "only the CUDA crates are compiled again:\n{said}"
    );
    assert!(
        manifest.contains("\ncuda 12\n"),
        "the published engine records CUDA 12:\n{manifest}"
    );
}

/// A machine with a GPU whose driver (CUDA 12.2) allows no major of the libraries found (only
/// CUDA 13's): the session builds the default engine, which loads no CUDA at all, and `:devices`
/// and the first `.to()` to the GPU say why and what to install; the CPU works as before.
#[test]
fn a_driver_too_old_for_the_cuda_libraries_found_says_what_to_install() {
    let _one = one_session_at_a_time();
    let root = std::env::temp_dir().join(format!("placelab-fake-cuda-{}", std::process::id()));
    let driver = fake_cuda::driver(&root, (12, 2));
    let cu13 = fake_cuda::libraries(&root, (13, 0));
    let script = format!(
        "{}/tests/scripts/cuda_unusable.plrs",
        env!("CARGO_MANIFEST_DIR")
    );
    let (out, ok) = run_script_with(
        &script,
        &[
            ("PLACELAB_SIMULATE_CUDA", "0"),
            ("LD_LIBRARY_PATH", &driver.to_string_lossy()),
            ("PLACELAB_CUDA_LIB_DIRS", &cu13.to_string_lossy()),
        ],
    );
    let _ = std::fs::remove_dir_all(&root);
    assert!(!ok, "the cell that asks for the GPU fails:\n{out}");
    let why = format!(
        "the NVIDIA driver supports CUDA 12.2, and the libraries found are CUDA 13's (NVRTC 13.0 \
         ({}/libnvrtc.so.13)",
        cu13.display()
    );
    expect(
        &out,
        &[
            &format!("no CUDA device: {why}"),
            "install CUDA 12's (`pip install nvidia-cuda-nvrtc-cu12 nvidia-cublas-cu12`), or update the driver",
            &format!("cuda:0 is not available: {why}"),
            "\n2.0\n",
        ],
    );
}

/// Two learners' kernels at once on capped emulated GPUs: each holds most of its share while
/// the other does; the one that asks past its cap gets the error naming the cap, and the other
/// keeps its memory and its tensor whole.
#[test]
fn two_kernels_at_once_each_within_its_own_cap() {
    let _one = one_session_at_a_time();
    let flags = std::env::temp_dir().join(format!("placelab-class-pair-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&flags);
    std::fs::create_dir_all(&flags).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/scripts/class_learner.plrs"
    );
    let learner = |name: &'static str| {
        let flags = flags.to_string_lossy().into_owned();
        std::thread::spawn(move || {
            run_script_with(
                script,
                &[
                    ("PLACELAB_SIMULATE_CUDA", "0"),
                    ("PLACELAB_EMULATE_CUDA", "1,1GiB"),
                    ("PLACELAB_CUDA_MEMORY_FRACTION", "0.25"),
                    ("LEARNER", name),
                    ("FLAGS", &flags),
                ],
            )
        })
    };
    let (a, b) = (learner("a"), learner("b"));
    let ((a, a_ok), (b, b_ok)) = (a.join().unwrap(), b.join().unwrap());
    let _ = std::fs::remove_dir_all(&flags);
    assert!(!a_ok, "learner a's cell past its cap fails:\n{a}");
    expect(
        &a,
        &[
            "\ntrue\n",
            "tried to allocate 300.00 MiB, past this process's cap of 256.00 MiB (0.25 of the device's 1.00 GiB",
            "(52428800.0, 200)",
        ],
    );
    assert!(b_ok, "learner b's cells all pass:\n{b}");
    expect(&b, &["\ntrue\n", "(52428800.0, 200)"]);
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

/// Every kind of variable a notebook keeps gets its type from rustc (vendor/evcxr/PATCH.md),
/// with no rust-analyzer in the session: the values come back in a later cell, `:vars` names
/// each type, the kinds that cannot be kept say why (a closure, a type left to inference, an
/// iterator over a closure, a function item), a type the user misspelt is rustc's error, and
/// the session's process stays small.
/// A first start where cargo cannot get the engine's crates (told to stay offline, with an empty
/// `CARGO_HOME`): the session's last words say so, with the command that fetches them, and it
/// exits with 2. Those words pass through the progress display's pipe on their way out, and
/// must not be lost when the process ends right after them.
#[test]
fn a_first_start_without_the_crates_says_how_to_get_them() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("offline-start");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("cargo-home")).unwrap();
    let out = user_command(env!("CARGO_BIN_EXE_placelab"))
        .arg("run-script")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/scripts/one_cell.plrs"
        ))
        .env("PLACELAB_CACHE", dir.join("cache"))
        .env("CARGO_HOME", dir.join("cargo-home"))
        .env("CARGO_NET_OFFLINE", "true")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    let last = said.trim_end().lines().last().unwrap_or_default();
    assert!(
        said.contains("cargo could not get its dependencies")
            && last.contains("cargo fetch --manifest-path")
            && last.ends_with("Cargo.toml"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn variables_keep_their_types_without_rust_analyzer() {
    let _one = one_session_at_a_time();
    let (out, ok) = run_script("variable_types.plrs");
    assert!(!ok, "five cells fail on purpose:\n{out}");
    // `:vars`: by name, each type as a person reads it.
    let vars = [
        "counts: BTreeMap<String, usize>",
        "double: Box<dyn Fn(f32) -> f32>",
        "f: f64",
        "it: IntoIter<i32>",
        "n: i32",
        "net: Sequential",
        "pair: (Tensor, u8)",
        "r: Result<Tensor, Error>",
        "s: Scaled",
        "x: Tensor",
    ];
    assert!(
        out.contains(&format!(">> :vars\n{}\n", vars.join("\n"))),
        "`:vars` does not list {vars:?}:\n{out}"
    );
    expect(
        &out,
        &[
            "\n([2, 4], [2], 3, 4.0, 6, 12.0, 0, 5, 2.5)\n",
            "error: The variable `add_one` is a closure, which cannot be persisted.",
            "error: Couldn't automatically determine type of variable `guess`.",
            "error: The variable `evens` has type `Map<std::ops::Range<i32>, {closure}>` which cannot be persisted.",
            // A type the user wrote wrong: rustc's error, not rust-analyzer's guess.
            "cannot find type `Tensr` in this scope\n        --> cell:2:11",
            "error: The variable `thrice` has type `fn(i32) -> i32 {triple}` which cannot be persisted.",
            // An elided lifetime is not a type left to inference.
            ">> let letters = \"abc\".chars();\n──",
            "\n(2, [4], 1.0, F32, 3)\n",
        ],
    );
    // One compile for a new variable of a common standard type, an engine type or the cells'
    // own; a type none of those names is named by rustc after the run (three more compiles).
    for (cell, compiles) in [
        ("let shape = x.shape().to_vec();", "1 compile"),
        ("let w = Tensor::zeros([4], &Device::Cpu)?;", "1 compile"),
        ("let s2 = Scaled { t: w.clone(), k: 1.0 };", "1 compile"),
        ("let more_letters = \"xyz\".chars();", "4 compiles"),
    ] {
        let took = out
            .split_once(&format!(">> :time {cell}\n"))
            .and_then(|(_, after)| after.lines().next())
            .unwrap_or_else(|| panic!("no `:time {cell}` in:\n{out}"));
        assert!(
            took.starts_with("took ") && took.ends_with(&format!(" ({compiles} and the run)")),
            "`:time {cell}` said {took:?}, not {compiles}:\n{out}"
        );
    }
    // rust-analyzer's database alone is hundreds of MiB (benches/class-footprint.sh).
    let rss = out
        .rsplit("\"session RSS: ")
        .next()
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no session RSS line:\n{out}"));
    assert!(rss < 150, "the session holds {rss} MiB:\n{out}");
}

/// After its first cell a session compiles cells without cargo (the rustc command cargo used
/// last); a `:dep` changes the manifest, so the next cell goes through cargo again and sees the
/// new crate, and the cells after it compile without cargo once more.
#[test]
fn a_dependency_added_mid_session_reaches_the_next_cells() {
    let _one = one_session_at_a_time();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("a-local-crate");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"local_answer\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("src/lib.rs"),
        "pub fn answer() -> i32 {\n    42\n}\n",
    )
    .unwrap();
    let script = dir.join("cells.plrs");
    let cells = [
        "let a = 1 + 1;".to_string(),
        "a + 1".into(),
        "a + 2".into(),
        format!(
            ":dep local_answer = {{ path = {:?} }}",
            dir.display().to_string()
        ),
        "local_answer::answer() + a".into(),
        "local_answer::answer() * a".into(),
    ];
    std::fs::write(&script, cells.join("\n// %%\n")).unwrap();
    let (out, ok) = run_script_at(script.to_str().unwrap());
    assert!(ok, "{out}");
    expect(&out, &["\n3\n", "\n4\n", "\n44\n", "\n84\n"]);
}

/// A class on one machine: an admin prebuilds the engine once, read-only (`prebuild --shared`);
/// every learner's session links to it. A second session beside an open one (a second notebook)
/// and another learner's session both reach their first result without compiling the engine,
/// each holding a few megabytes of its own; a session's directory goes when it ends, and one
/// left by a killed session goes at the next start.
#[test]
fn learners_share_one_prebuilt_engine() {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let _one = one_session_at_a_time();
    let class = std::path::Path::new(CACHE).with_file_name("placelab-class-test");
    /// Removes the class's directory, passed or failed: its engine is read-only even for its
    /// owner, which would stop `cargo clean`.
    struct Removed<'a>(&'a std::path::Path);
    impl Drop for Removed<'_> {
        fn drop(&mut self) {
            let _ = Command::new("chmod")
                .args(["-R", "u+w"])
                .arg(self.0)
                .status();
            let _ = std::fs::remove_dir_all(self.0);
        }
    }
    drop(Removed(&class));
    let _removed = Removed(&class);
    std::fs::create_dir_all(&class).unwrap();
    // A copy of this machine's engine, so that the admin's prebuild finds it fresh and does not
    // take minutes here.
    let engine = copy_of_this_machines_engine(&class);

    let placelab = |cache: &str| {
        let mut c = user_command(env!("CARGO_BIN_EXE_placelab"));
        c.env("PLACELAB_CACHE", class.join(cache))
            .env("PLACELAB_ENGINE", &engine)
            .env("PLACELAB_SIMULATE_CUDA", "1");
        c
    };
    let out = placelab("admin")
        .args(["prebuild", "--shared"])
        .arg(&engine)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("shared read-only"), "{said}");
    assert!(!said.contains("compiling"), "the engine was fresh:\n{said}");
    let deps = std::fs::read_dir(engine.join("work/target"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("debug/deps"))
        .find(|d| d.is_dir())
        .expect("the engine's deps");
    let artefact = std::fs::read_dir(&deps)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("libplacelab-"))
        .expect("the engine library")
        .path();
    let mode = std::fs::metadata(&artefact).unwrap().permissions().mode();
    assert_eq!(mode & 0o222, 0, "a shared engine is writable by none");
    let built_at = std::fs::metadata(&artefact).unwrap().modified().unwrap();

    // Learner A's first notebook holds slot 0 for as long as it runs.
    let mut first = placelab("learner-a")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the REPL starts");
    let slot0 = class.join("learner-a/sessions/session-0");
    let claimed = (0..200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        slot0.join("work/target").exists()
    });
    assert!(
        claimed,
        "the first session claims session-0 and links the engine"
    );
    kept_apart(
        &class.join("learner-a"),
        &class.join(format!("learner-a/probe-{}.sock", first.id())),
        &engine,
        &artefact,
    );
    let script = format!("{}/tests/scripts/learner.plrs", env!("CARGO_MANIFEST_DIR"));
    let learn = |cache: &str| {
        let out = placelab(cache)
            .args(["run-script", &script])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        expect(&text, &["[1000]"]);
        assert!(
            !text.contains("compiling"),
            "a learner's session compiled the engine:\n{text}"
        );
        let own_kib: u64 = text
            .rsplit("own disk: ")
            .next()
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("the script reports its disk use:\n{text}"));
        assert!(
            own_kib < 50 * 1024,
            "a session holds {own_kib} KiB of its own:\n{text}"
        );
        text
    };
    // A's second notebook, beside the first, and learner B.
    learn("learner-a");
    learn("learner-b");
    for ended in [
        "learner-a/sessions/session-1",
        "learner-b/sessions/session-0",
    ] {
        assert!(
            !class.join(ended).join("work").exists(),
            "{ended} was not removed when it ended"
        );
    }
    // A's first session is killed (out of memory, culled): its directory stays until the next start.
    first.kill().unwrap();
    let _ = first.wait();
    assert!(slot0.join("work").exists());
    let _ = first.stdin.take().map(|mut i| i.write_all(b""));
    learn("learner-a");
    assert!(
        !slot0.join("work").exists(),
        "the killed session's directory was swept"
    );
    assert_eq!(
        std::fs::metadata(&artefact).unwrap().modified().unwrap(),
        built_at,
        "no session changed the shared engine"
    );
}

/// One learner's session, seen by another: the cache (cells, history, the socket that reaches
/// the session) is its owner's alone, and the shared engine is readable by every learner and
/// writable by none. The other learner is the system user `nobody`, which only root can become:
/// elsewhere this checks the modes alone, and says that it did.
fn kept_apart(
    cache: &std::path::Path,
    probe: &std::path::Path,
    engine: &std::path::Path,
    artefact: &std::path::Path,
) {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let up = (0..400).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::metadata(probe).is_ok_and(|m| m.file_type().is_socket())
    });
    assert!(
        up,
        "the session's probe socket {} appeared",
        probe.display()
    );
    for (path, private) in [(cache, 0o700), (probe, 0o600)] {
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, private, "{} is {mode:o}", path.display());
    }
    let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    if !root {
        skipped::report(
            "repl",
            "another learner's access, tried as `nobody`",
            "only root can become `nobody` (the modes were checked)",
        );
        return;
    }
    let id = |flag: &str| -> u32 {
        let out = Command::new("id").args([flag, "nobody"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a user `nobody`")
    };
    // What `nobody` may do; `test -w` on the socket asks what connect(2) checks (search on every
    // folder on the way, write on the socket).
    let tries = r#"
try() { what=$1; shift; if "$@" >/dev/null 2>&1; then echo "$what allowed"; else echo "$what denied"; fi; }
try connect test -w "$1"
try list ls "$2"
try read-history cat "$3"
try write-engine touch "$4/work/planted"
try read-engine head -c1 "$5"
"#;
    use std::os::unix::process::CommandExt;
    let out = Command::new("/bin/sh")
        .args(["-c", tries, "sh"])
        .args([
            probe,
            &cache.join("sessions"),
            &cache.join("history.txt"),
            engine,
            artefact,
        ])
        .uid(id("-u"))
        .gid(id("-g"))
        .output()
        .expect("sh runs as nobody");
    let (said, err) = (
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert_eq!(
        said,
        "connect denied\nlist denied\nread-history denied\nwrite-engine denied\nread-engine allowed",
        "another learner's view of this one's session and of the shared engine:\n{err}"
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

/// A bad index on an emulated GPU fails the cell that queued the op, naming the op, the entry,
/// the device and the variables the cell defined, though nothing in that cell waited for the
/// device (`index_select` checks its entries as its kernel runs); the next cell, which waits,
/// runs and answers. A negative entry too, in a cell that binds `i` again.
#[test]
fn a_bad_index_on_a_gpu_fails_its_own_cell_not_the_next() {
    let _one = one_session_at_a_time();
    let (out, ok) = run_script("device_checks.plrs");
    assert!(!ok, "two cells fail, so the exit status is 1:\n{out}");
    // Each cell's output, by the cell's first line.
    let cell = |first: &str| {
        let at = out
            .find(&format!(">> {first}\n"))
            .unwrap_or_else(|| panic!("no cell {first:?}:\n{out}"));
        let rest = &out[at + 3..];
        &rest[..rest.find("\n>> ").unwrap_or(rest.len())]
    };
    for (first, entry, defined) in [
        ("let d = Device::Cuda(0);", 9, "`d`, `i`, `y`"),
        (
            "let i = Tensor::from_vec(vec![-5i64, 1], [2], &d)?;",
            -5,
            "`i`, `w`",
        ),
    ] {
        expect(
            cell(first),
            &[
                &format!(
                    "error: index {entry} out of range in index_select: dimension 0 has size 3"
                ),
                "cuda:0 checked this as its kernel ran",
                "this cell queued that op: it is reported as the cell ended",
                &format!(
                    "This cell defined {defined}: those made from that op's result hold invalid values."
                ),
            ],
        );
    }
    for (first, answer) in [
        ("let z = Tensor::ones([4], &d)?;", "\n4.0\n"),
        ("z.sum_all()?.item::<f32>()? + 1.0", "\n5.0\n"),
    ] {
        let shown = cell(first);
        assert!(
            shown.contains(answer) && !shown.contains("error"),
            "the next cell runs and answers {answer:?}:\n{shown}\n\nin:\n{out}"
        );
    }
}

/// `:profile` takes any code a cell takes: the profile shows, then the code's value below it as
/// its card (a product, a block's last value), as `:time` shows it; statements define nothing in
/// the session; code that fails fails its cell below the profile up to the failure (an error, a
/// panic), and the session goes on.
#[test]
fn profile_shows_the_profile_then_the_codes_value() {
    let _one = one_session_at_a_time();
    let (out, ok) = run_script("profile.plrs");
    assert!(
        !ok,
        "three cells fail on purpose, so the exit status is 1:\n{out}"
    );
    // Each cell's output, by the start of the cell's first line.
    let cell = |first: &str| {
        let at = out
            .find(&format!(">> {first}"))
            .unwrap_or_else(|| panic!("no cell {first:?}:\n{out}"));
        let rest = &out[at..];
        let rest = &rest[rest.find('\n').map_or(rest.len(), |end| end + 1)..];
        rest[..rest.find("\n>> ").unwrap_or(rest.len())].to_string()
    };
    // The profile (its coverage line, under the table), then the value's card below it.
    let profile_then = |first: &str, row: &str, card: &str| {
        let shown = cell(first);
        let (table, value) = match (shown.find(row), shown.find(" ops took "), shown.find(card)) {
            (Some(row), Some(coverage), Some(card)) if row < coverage && coverage < card => {
                (&shown[..card], &shown[card..])
            }
            _ => panic!("{first}: a profile with {row:?}, then {card:?} below it:\n{shown}"),
        };
        assert!(
            !shown.contains("error") && !table.contains("stops there"),
            "{first}:\n{shown}"
        );
        value.to_string()
    };
    profile_then(
        ":profile x.matmul(&y)?",
        "matmul",
        "Tensor f32[2, 2] · cuda:0 (simulated)",
    );
    // `:timeline`: the lanes (the host's alone on a simulated device), then the value.
    let lanes = cell(":timeline x.matmul(&y)?");
    let card = lanes.find("Tensor f32[2, 2] · cuda:0 (simulated)");
    let verdict = lanes.find("no copy on a GPU to hide (no GPU times");
    assert!(
        lanes.contains("\nhost ") && verdict.is_some() && verdict < card,
        "the lanes, then the value:\n{lanes}"
    );
    let sum = profile_then(
        ":profile { let mut w = Tensor::randn([512, 512], &d)?;",
        "relu",
        "Tensor f32[] · cuda:0 (simulated)",
    );
    assert!(
        !sum.contains("[512, 512]"),
        "the block's value is its sum:\n{sum}"
    );
    // Statements: the profile alone (their value is `()`), and nothing defined in the session.
    let statements = cell(":profile let loss = x.matmul(&w)?.sum_all()?; loss.backward()?;");
    assert!(
        statements.contains("backward ") && !statements.contains("Tensor f32"),
        "{statements}"
    );
    expect(&cell("loss"), &["cannot find value `loss`"]);
    expect(&cell("w.grad().is_some()"), &["true"]);
    // An error: the profile up to it, then the cell's error (Run All and a script stop there).
    let failed = cell(":profile x.matmul(&x)?");
    let (profile, error) = failed
        .split_once("\nerror: ")
        .unwrap_or_else(|| panic!("the cell fails with the code's error:\n{failed}"));
    expect(profile, &["the code failed, so this profile stops there: "]);
    expect(error, &["matmul"]);
    // A panic too, with its message (code that never returns: its value's type is left to
    // inference, which the cell's value does not settle), and the session goes on.
    let panicked = cell(":profile let h = x.relu()?;");
    let (profile, error) = panicked
        .split_once("\nerror: panic in the cell")
        .unwrap_or_else(|| panic!("the cell fails with the code's panic:\n{panicked}"));
    expect(profile, &["relu", "panicked: boom under the profile"]);
    expect(error, &["boom under the profile"]);
    expect(&cell("x.numel()"), &["6"]);
}

/// Cells of a long session in this test (2,000 in a term's session; the growth per cell is what
/// is bounded, so a CI-sized count shows it).
const LONG_SESSION_CELLS: usize = 125;
/// Each cell is a library the cell process keeps loaded (evcxr cannot unload one: its functions
/// and types may still be in use): about 127 KiB of this test's cells, 50 KiB of it private (the
/// rest is the library's file pages). Under the 256 KiB of one of its tensors: a cell that leaked
/// its tensors would fail this.
const CELL_PROCESS_GROWTH_PER_CELL_KIB: u64 = 192;
/// The session's own process keeps a cell's history entry and memory line, nothing else.
const SESSION_GROWTH_KIB: u64 = 8 * 1024;

/// A long session stays small: cells that make, move and drop tensors leave the session process
/// flat and grow the cell process by its loaded cells alone, and the transfer log keeps its
/// latest 100,000 transfers.
#[test]
fn a_long_session_stays_small() {
    let _one = one_session_at_a_time();
    let mut script = String::from(
        "fn rss_kib(pid: &str) -> u64 {\n\
         \x20   let status = std::fs::read_to_string(format!(\"/proc/{pid}/status\")).unwrap();\n\
         \x20   let line = status.lines().find(|l| l.starts_with(\"VmRSS:\")).unwrap();\n\
         \x20   line.split_whitespace().nth(1).unwrap().parse().unwrap()\n\
         }\n",
    );
    for cell in 1..=LONG_SESSION_CELLS {
        script.push_str(
            "// %%\nlet a = Tensor::randn([64, 1024], &Device::Cpu)?;\n\
             let b = a.to(&Device::Cuda(0))?;\ndrop(a);\n\
             let s = b.sum_all()?.item::<f32>()?;\ndrop(b);\n",
        );
        if cell % 25 == 0 {
            script.push_str(&format!(
                "println!(\"rss {cell} {{}} {{}}\", rss_kib(\"self\"), \
                 rss_kib(&std::os::unix::process::parent_id().to_string()));\n"
            ));
        }
    }
    script.push_str(
        "// %%\nlet one = Tensor::ones([1], &Device::Cpu)?;\n\
         for _ in 0..120_000 { let _ = one.to(&Device::Cuda(0))?; }\n\
         println!(\"transfers kept {}\", placelab::transfer::log().len());\n",
    );
    let path = format!("{}/long_session.plrs", env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(&path, script).unwrap();
    let (out, ok) = run_script_at(&path);
    assert!(ok, "every cell runs:\n{out}");
    let samples: Vec<[u64; 3]> = out
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("rss ")?.split(' ').map(|n| n.parse().ok());
            Some([w.next()??, w.next()??, w.next()??])
        })
        .collect();
    assert_eq!(samples.len(), LONG_SESSION_CELLS / 25, "{out}");
    // From the first sample on: the first cells load what every later cell reuses.
    let ([c0, cell0, session0], [c1, cell1, session1]) = (samples[0], samples[samples.len() - 1]);
    let per_cell = cell1.saturating_sub(cell0) / (c1 - c0);
    eprintln!(
        "long session: the cell process grew {per_cell} KiB a cell ({cell0} -> {cell1} KiB), \
         the session {session0} -> {session1} KiB, over cells {c0}..{c1}"
    );
    assert!(
        per_cell <= CELL_PROCESS_GROWTH_PER_CELL_KIB,
        "the cell process grew {per_cell} KiB a cell:\n{out}"
    );
    assert!(
        session1.saturating_sub(session0) <= SESSION_GROWTH_KIB,
        "the session grew from {session0} to {session1} KiB:\n{out}"
    );
    expect(
        &out,
        &[
            "transfers kept 100000",
            "120000 transfers, the latest 100000 kept this cell",
        ],
    );
}
