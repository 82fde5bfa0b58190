//! The Jupyter kernel under real Python clients: jupyter_kernel_test's conformance suite, and
//! BlockingKernelClient, nbclient and `jupyter console` sessions (`tests/jupyter/*.py`), run by
//! pytest from a venv made once under `target/jupyter-venv`.
//!
//! Every Jupyter test lives in this one binary (each test binary links evcxr: link time). The
//! tests that start kernels take one lock, because two kernels side by side would each claim a
//! compile directory and rebuild the engine in it (minutes). `PLACELAB_SKIP_JUPYTER_TESTS=1`
//! skips them where PyPI cannot be reached.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

#[path = "jupyter/browser.rs"]
mod browser;
#[path = "jupyter/classroom.rs"]
mod classroom;
#[path = "support/user_env.rs"]
mod user_env;
#[path = "../engine/tests/support/venv.rs"]
mod venv;

use user_env::user_command;

const KERNEL_NAME: &str = "placelab";
/// pytest's whole run is bounded; past this it is interrupted (its fixtures stop the kernels).
const PYTEST_LIMIT: Duration = Duration::from_secs(30 * 60);
/// The kernels' PLACELAB_INTERRUPT_GRACE, the default, set so a value in the developer's shell
/// cannot change what an interrupt does (the tests assert which cells survive it).
const INTERRUPT_GRACE: &str = "2";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn target() -> PathBuf {
    root().join("target")
}

/// The compile cache shared with tests/repl.rs: warm, a kernel's first cell takes seconds.
fn session_cache() -> PathBuf {
    target().join("placelab-session-cache")
}

/// `PLACELAB_SKIP_JUPYTER_TESTS=1` (and only `1`) skips the Jupyter tests, saying so on the
/// terminal: written to stderr directly, so the test harness's capture of a passing test's
/// output does not hide that it ran nothing.
fn skipped() -> bool {
    let skip = std::env::var("PLACELAB_SKIP_JUPYTER_TESTS").as_deref() == Ok("1");
    if skip {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: PLACELAB_SKIP_JUPYTER_TESTS=1, so this Jupyter test ran nothing"
        );
    }
    skip
}

/// Held by every test that starts a kernel or a session.
fn one_kernel_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The venv's python, with `tests/jupyter/requirements.txt` installed (every package pinned).
/// Tests run on parallel threads: one makes the venv while the others wait. A changed
/// requirements file makes it again (`support/venv.rs`).
fn venv_python() -> PathBuf {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    VENV.get_or_init(make_venv)
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn make_venv() -> Result<PathBuf, String> {
    let venv = target().join("jupyter-venv");
    let requirements = root().join("tests/jupyter/requirements.txt");
    let pins = std::fs::read_to_string(&requirements)
        .map_err(|e| format!("cannot read {}: {e}", requirements.display()))?;
    venv::pinned_venv(&venv, &pins, &["-r".as_ref(), requirements.as_os_str()]).map_err(|e| {
        format!(
            "could not install the Jupyter clients into {} (needs python3 and PyPI; set \
             PLACELAB_SKIP_JUPYTER_TESTS=1 to skip these tests offline): {e}",
            venv.display()
        )
    })
}

/// Compiles the engine into the session cache once (minutes when cold), so that no kernel's
/// first cell waits for it. Call with the kernel lock held.
fn warm_session_cache() {
    static WARM: OnceLock<Result<(), String>> = OnceLock::new();
    WARM.get_or_init(|| {
        let script = target().join("jupyter-warm.plrs");
        std::fs::write(&script, "let warm = 1 + 1;\n// %%\nwarm\n")
            .map_err(|e| format!("cannot write {}: {e}", script.display()))?;
        let started = Instant::now();
        let out = user_command(env!("CARGO_BIN_EXE_placelab"))
            .arg("run-script")
            .arg(&script)
            .env("PLACELAB_CACHE", session_cache())
            .env("PLACELAB_SIMULATE_CUDA", "1")
            .output()
            .map_err(|e| format!("placelab run-script did not run: {e}"))?;
        let text = format!(
            "{}\n--- stderr ---\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() || !text.contains('2') {
            return Err(format!(
                "warming the session cache failed ({}):\n{text}",
                out.status
            ));
        }
        eprintln!(
            "session cache warm in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        Ok(())
    })
    .clone()
    .unwrap_or_else(|e| panic!("{e}"));
}

/// The kernelspec, installed once into `target/jupyter-prefix`; returns its JUPYTER_PATH.
fn installed_kernelspec() -> PathBuf {
    static SPEC: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    SPEC.get_or_init(|| {
        let prefix = target().join("jupyter-prefix");
        let out = user_command(env!("CARGO_BIN_EXE_placelab"))
            .args(["install-kernel", "--prefix"])
            .arg(&prefix)
            .args(["--name", KERNEL_NAME])
            .output()
            .map_err(|e| format!("placelab install-kernel did not run: {e}"))?;
        let data = prefix.join("share/jupyter");
        if !out.status.success()
            || !data
                .join("kernels")
                .join(KERNEL_NAME)
                .join("kernel.json")
                .exists()
        {
            return Err(format!(
                "placelab install-kernel --prefix {} failed ({}):\n{}{}",
                prefix.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(data)
    })
    .clone()
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The CUDA devices the kernels pytest starts begin with.
#[derive(Clone, Copy, PartialEq)]
enum StandIns {
    /// PLACELAB_SIMULATE_CUDA set to this.
    Simulated(&'static str),
    /// PLACELAB_EMULATE_CUDA set to this: the real kernels and `engine/src/backend/gpu/`, on the CPU.
    Emulated(&'static str),
    /// Neither: the machine as it is (a notebook's first cell decides).
    AsTheMachineIs,
}

/// Runs one pytest file against kernels with one simulated GPU (see `pytest_on`).
fn pytest(file: &str) {
    pytest_on(file, StandIns::Simulated("1"));
}

/// Runs one pytest file against the kernel and fails with pytest's output unless every test
/// collected passed (exit 0). The whole output is also kept in `target/jupyter-logs/`, as
/// `FILE.log` (`FILE-emulated.log` on emulated devices).
fn pytest_on(file: &str, devices: StandIns) {
    if skipped() {
        return;
    }
    let python = venv_python();
    let _kernel = one_kernel_at_a_time();
    warm_session_cache();
    let jupyter_path = installed_kernelspec();

    let logs = target().join("jupyter-logs");
    let work = target().join("jupyter-work");
    for dir in [
        &logs,
        &work.join("runtime"),
        &work.join("config"),
        &work.join("ipython"),
    ] {
        std::fs::create_dir_all(dir).expect("target/ is writable");
    }
    let run_name = match devices {
        StandIns::Emulated(_) => format!("{}-emulated", file.trim_end_matches(".py")),
        _ => file.trim_end_matches(".py").to_string(),
    };
    let log_path = logs.join(format!("{run_name}.log"));
    let log = File::create(&log_path).expect("target/ is writable");
    // Each run starts with an empty history: searches count only this run's cells.
    let history = work.join(format!("{run_name}-history.jsonl"));
    let _ = std::fs::remove_file(&history);
    let started = Instant::now();
    let mut command = user_command(&python);
    command
        .env_remove("PLACELAB_SIMULATE_CUDA")
        .env_remove("PLACELAB_EMULATE_CUDA");
    match devices {
        StandIns::Simulated(n) => command.env("PLACELAB_SIMULATE_CUDA", n),
        StandIns::Emulated(n) => command.env("PLACELAB_EMULATE_CUDA", n),
        StandIns::AsTheMachineIs => &mut command,
    };
    // An emulated run's executed notebooks go beside the simulated run's, not over them.
    let notebooks_out = match devices {
        StandIns::Emulated(_) => target().join("notebooks-emulated"),
        _ => target().join("notebooks"),
    };
    let mut child = command
        .args([
            "-m",
            "pytest",
            "-q",
            "-rfEs",
            // One `SKIPPED <test id> - <reason>` line per skipped test (`report_skipped`).
            "--no-fold-skipped",
            "-p",
            "no:cacheprovider",
            "--durations=8",
        ])
        .arg(root().join("tests/jupyter").join(file))
        .current_dir(root())
        .env("JUPYTER_PATH", &jupyter_path)
        .env("JUPYTER_RUNTIME_DIR", work.join("runtime"))
        .env("JUPYTER_CONFIG_DIR", work.join("config"))
        .env("JUPYTER_DATA_DIR", work.join("data"))
        .env("JUPYTER_PLATFORM_DIRS", "1")
        .env("IPYTHONDIR", work.join("ipython"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PLACELAB_CACHE", session_cache())
        .env("PLACELAB_KERNEL_NAME", KERNEL_NAME)
        .env("PLACELAB_NOTEBOOK_OUT", notebooks_out)
        .env("PLACELAB_HISTORY", &history)
        .env("PLACELAB_BIN", env!("CARGO_BIN_EXE_placelab"))
        .env("PLACELAB_INTERRUPT_GRACE", INTERRUPT_GRACE)
        // The soak's count, 300 unless the developer's shell asks for the long run.
        .env(
            "PLACELAB_SOAK_INTERRUPTS",
            std::env::var("PLACELAB_SOAK_INTERRUPTS").unwrap_or_else(|_| "300".into()),
        )
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("a log file handle"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{} -m pytest did not start: {e}", python.display()));
    let finished = loop {
        if let Some(status) = child.try_wait().expect("waiting for pytest") {
            break Some(status);
        }
        if started.elapsed() > PYTEST_LIMIT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if finished.is_none() {
        // SIGINT first: pytest then runs its fixtures' finalizers, which stop the kernels.
        // SAFETY: kill on the pid of our own child, which has not been reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let grace = Instant::now();
        while grace.elapsed() < Duration::from_secs(30) && matches!(child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    let output = std::fs::read_to_string(&log_path).unwrap_or_default();
    report_skipped(file, &output);
    let took = started.elapsed().as_secs_f64();
    let Some(status) = finished else {
        panic!(
            "pytest {file} ran past {} s and was stopped; the log is {}:\n{output}",
            PYTEST_LIMIT.as_secs(),
            log_path.display()
        );
    };
    match status.code() {
        // Shown with --nocapture: the summary and the kernel's timings.
        Some(0) => println!("{output}\npytest {file}: passed in {took:.1} s"),
        Some(5) => panic!(
            "pytest collected no tests from tests/jupyter/{file} (exit 5): a test file that runs \
             nothing must not pass.\n{output}"
        ),
        code => panic!(
            "pytest {file} failed (exit {code:?}) after {took:.1} s; the log is {}:\n{output}",
            log_path.display()
        ),
    }
}

/// Names each test pytest skipped, with its reason, on the terminal: written to stderr directly,
/// past the harness's capture of a passing test's output, so `cargo test` shows what did not
/// run. The lines are pytest's summary (`-rs --no-fold-skipped`): `SKIPPED <id> - <reason>`.
fn report_skipped(file: &str, output: &str) {
    use std::io::Write;
    let mut stderr = std::io::stderr().lock();
    for line in output.lines().filter(|l| l.starts_with("SKIPPED ")) {
        // unittest's skips carry a `Skipped: ` of their own.
        let line = line.replacen(" - Skipped: ", " - ", 1);
        let _ = writeln!(stderr, "pytest {file}: {line}");
    }
}

#[test]
fn kernel_passes_jupyter_kernel_test_conformance() {
    pytest("test_conformance.py");
}

#[test]
fn kernel_serves_real_clients() {
    pytest("test_client.py");
}

/// Interrupts at random moments (tests/jupyter/test_soak.py): 300 here;
/// `PLACELAB_SOAK_INTERRUPTS=1000` for the long run.
#[test]
fn interrupts_at_random_moments_leave_a_working_kernel() {
    pytest("test_soak.py");
}

#[test]
fn notebooks_consoles_and_the_command_line_run_it() {
    pytest("test_front_ends.py");
}

/// The tutorials, executed through the kernel on the machine as it is (simulated GPUs come from
/// each notebook's first cell), with the facts each teaches checked. Also renders them,
/// executed, to `target/notebooks/*.html` (README: "Reading the notebooks").
#[test]
fn tutorial_notebooks_run_and_teach_their_facts() {
    pytest_on("test_notebooks.py", StandIns::AsTheMachineIs);
}

/// The same tutorials on the GPU code path: two emulated devices, which each notebook's first
/// cell keeps, run the real `kernels/*.cu` and `engine/src/backend/gpu/` as a real GPU would; each test checks
/// the facts that path shows (cuBLAS's workspace, a reduction's scratch, measured times).
#[test]
fn tutorial_notebooks_teach_their_facts_on_the_gpu_code_path() {
    pytest_on("test_notebooks.py", StandIns::Emulated("2,16GiB"));
}

/// `notebooks/executed/` is read in place of running the notebooks (the README links it), so
/// each copy has its notebook's cells, source for source, and every code cell ran; the only
/// errors it shows are those whose lesson is an error. Needs neither Python nor a kernel.
#[test]
fn executed_copies_hold_their_notebooks_cells() {
    let refresh = "run notebooks/refresh-executed.sh";
    let notebooks = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}: {refresh}", dir.display()))
            .map(|e| {
                e.expect("a directory entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|n| n.ends_with(".ipynb"))
            .collect();
        names.sort();
        names
    };
    let cells = |path: &Path| -> Vec<serde_json::Value> {
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let nb: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not a notebook: {e}", path.display()));
        nb["cells"].as_array().cloned().unwrap_or_default()
    };
    // A cell's source is a string or a list of lines in the file; compared as one string.
    let source = |cell: &serde_json::Value| match &cell["source"] {
        serde_json::Value::Array(lines) => {
            lines.iter().filter_map(|l| l.as_str()).collect::<String>()
        }
        other => other.as_str().unwrap_or_default().to_owned(),
    };
    let dir = root().join("notebooks");
    let executed = dir.join("executed");
    let names = notebooks(&dir);
    assert_eq!(
        notebooks(&executed),
        names,
        "the executed copies are not the notebooks: {refresh}"
    );
    for name in &names {
        let (mine, ran) = (cells(&dir.join(name)), cells(&executed.join(name)));
        let key =
            |c: &serde_json::Value| (c["id"].to_string(), c["cell_type"].to_string(), source(c));
        let differ: Vec<String> = mine
            .iter()
            .zip(&ran)
            .filter(|(m, r)| key(m) != key(r))
            .map(|(m, _)| m["id"].as_str().unwrap_or("?").to_owned())
            .collect();
        assert!(
            mine.len() == ran.len() && differ.is_empty(),
            "notebooks/executed/{name} differs from its notebook ({} cells against {}; cells that \
             differ: {differ:?}): {refresh}",
            ran.len(),
            mine.len()
        );
        for cell in ran.iter().filter(|c| c["cell_type"] == "code") {
            let id = cell["id"].as_str().unwrap_or("?");
            assert!(
                cell["execution_count"].is_u64(),
                "{name}: cell {id} did not run in the executed copy: {refresh}"
            );
            let outputs = cell["outputs"].as_array().cloned().unwrap_or_default();
            let failed = outputs.iter().any(|o| o["output_type"] == "error");
            let tags = cell["metadata"]["tags"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let expected = tags.iter().any(|t| t == "raises-exception");
            assert!(
                expected || !failed,
                "{name}: cell {id} failed in the executed copy: {refresh}"
            );
        }
    }
}

/// `placelab ARGS --prefix PREFIX` with no JUPYTER_PATH: whether it succeeded, and what it said.
fn placelab_at(prefix: &Path, args: &[&str]) -> (bool, String) {
    let out = user_command(env!("CARGO_BIN_EXE_placelab"))
        .args(args)
        .arg("--prefix")
        .arg(prefix)
        .env_remove("JUPYTER_PATH")
        .output()
        .expect("placelab runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `install-kernel` writes a kernelspec that starts this binary with message interrupts, under
/// the default name or a given one, and says how Jupyter finds a `--prefix`; `uninstall-kernel`
/// removes it, and the folders install made, which leaves no trace of a prefix that was not
/// there. No kernel starts.
#[test]
fn install_and_uninstall_kernelspec_through_the_command_line() {
    let prefix = target().join(format!("jupyter-prefix-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&prefix);
    let placelab = |args: &[&str]| placelab_at(&prefix, args);
    let kernels = prefix.join("share/jupyter/kernels");
    let exe = Path::new(env!("CARGO_BIN_EXE_placelab"))
        .canonicalize()
        .expect("the binary exists");

    let (ok, text) = placelab(&["install-kernel"]);
    assert!(ok, "{text}");
    // Jupyter looks in a prefix only when told: the message says how.
    let told = format!(
        "JUPYTER_PATH={} jupyter lab",
        prefix.join("share/jupyter").display()
    );
    assert!(text.contains(&told), "no `{told}` in:\n{text}");
    // Under target/debug, the kernelspec points at a build `cargo clean` deletes: it says so.
    let parts: Vec<_> = exe.components().map(|c| c.as_os_str()).collect();
    if parts
        .windows(2)
        .any(|w| w[0] == "target" && w[1] == "debug")
    {
        assert!(
            text.contains("cargo clean") && text.contains("cargo install --locked --path ."),
            "{text}"
        );
    }
    let spec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(kernels.join("placelab/kernel.json"))
            .expect("the default name is `placelab`"),
    )
    .expect("kernel.json is JSON");
    let argv: Vec<&str> = spec["argv"]
        .as_array()
        .expect("argv is a list")
        .iter()
        .map(|a| a.as_str().expect("argv holds strings"))
        .collect();
    assert_eq!(
        argv,
        [
            exe.to_str().unwrap(),
            "kernel",
            "--connection-file",
            "{connection_file}"
        ],
        "{spec}"
    );
    assert_eq!(spec["interrupt_mode"], "message", "{spec}");
    assert_eq!(spec["language"], "rust", "{spec}");

    let (ok, text) = placelab(&[
        "install-kernel",
        "--name",
        "placelab-other",
        "--display-name",
        "Other placelab",
    ]);
    assert!(ok, "{text}");
    let other: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(kernels.join("placelab-other/kernel.json")).expect("installed"),
    )
    .expect("kernel.json is JSON");
    assert_eq!(other["display_name"], "Other placelab", "{other}");

    let (ok, text) = placelab(&["uninstall-kernel", "--name", "placelab-other"]);
    assert!(ok, "{text}");
    assert!(!kernels.join("placelab-other").exists());
    assert!(
        kernels.join("placelab/kernel.json").exists(),
        "only the named one goes"
    );
    let (ok, text) = placelab(&["uninstall-kernel"]);
    assert!(ok, "{text}");
    assert!(!kernels.join("placelab").exists());
    // The prefix was not there before: install made it, and uninstall removed it again.
    assert!(!prefix.exists(), "{} is left: {text}", prefix.display());
    assert!(text.contains(&prefix.display().to_string()), "{text}");
    let (ok, text) = placelab(&["uninstall-kernel"]);
    assert!(!ok, "uninstalling what is not installed fails: {text}");
    let _ = std::fs::remove_dir_all(&prefix);
}

/// Uninstalling removes only the folders install made, and only empty ones: an empty prefix
/// that was there stays (empty), and so does a folder that held something, with what it held.
#[test]
fn uninstall_kernel_leaves_the_folders_that_were_there() {
    let base = target().join(format!("jupyter-prefix-kept-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let empty = base.join("empty");
    std::fs::create_dir_all(&empty).expect("a temporary folder");
    let (ok, text) = placelab_at(&empty, &["install-kernel"]);
    assert!(ok, "{text}");
    let (ok, text) = placelab_at(&empty, &["uninstall-kernel"]);
    assert!(ok, "{text}");
    let left: Vec<_> = std::fs::read_dir(&empty)
        .expect("the prefix that was there stays")
        .collect();
    assert!(left.is_empty(), "{left:?} left after: {text}");

    let full = base.join("full");
    std::fs::create_dir_all(full.join("share/jupyter")).expect("a temporary folder");
    std::fs::write(full.join("share/jupyter/mine.txt"), "kept").expect("a file");
    let (ok, text) = placelab_at(&full, &["install-kernel"]);
    assert!(ok, "{text}");
    let (ok, text) = placelab_at(&full, &["uninstall-kernel"]);
    assert!(ok, "{text}");
    assert!(
        !full.join("share/jupyter/kernels").exists(),
        "install made kernels/: {text}"
    );
    assert_eq!(
        std::fs::read_to_string(full.join("share/jupyter/mine.txt")).ok(),
        Some("kept".into()),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// `placelab --help` names every environment variable a user may set, each once, on a line of
/// at most 100 columns.
#[test]
fn help_lists_every_environment_variable() {
    let out = user_command(env!("CARGO_BIN_EXE_placelab"))
        .arg("--help")
        .output()
        .expect("placelab runs");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for var in [
        "PLACELAB_SIMULATE_CUDA",
        "PLACELAB_EMULATE_CUDA",
        "PLACELAB_NO_CUDA",
        "PLACELAB_CUDA_LIB_DIRS",
        "PLACELAB_CUDA_MEMORY_FRACTION",
        "PLACELAB_IDLE_EMPTY_CACHE",
        "PLACELAB_CACHE",
        "PLACELAB_ENGINE",
        "PLACELAB_HISTORY",
        "PLACELAB_INTERRUPT_GRACE",
        "PLACELAB_NO_KERNEL_CACHE",
    ] {
        let lines: Vec<&str> = help
            .lines()
            .filter(|l| l.trim_start().starts_with(&format!("{var}=")))
            .collect();
        assert_eq!(lines.len(), 1, "{var} on one line of:\n{help}");
        assert_eq!(help.matches(var).count(), 1, "{var} once in:\n{help}");
    }
    for line in help.lines() {
        assert!(
            line.chars().count() <= 100,
            "a line over 100 columns: {line}"
        );
    }
}
