//! A second start works, whatever started the first (issue 38), and whatever broke the cache
//! before it (issue 43). On one fresh `PLACELAB_CACHE`: a first session, then a `prebuild`, each
//! killed at a random moment of its build; then a class of eight kernels opened at once (one
//! builds the engine, the others wait for it), with the environment cargo gives a program it
//! starts (`cargo run --release`, the README's first command, gives it the same: `CARGO_*`,
//! `LD_LIBRARY_PATH` with the toolchain's libraries, `RUSTUP_TOOLCHAIN`). Every later start is
//! as a user's shell or Jupyter starts it, without any of that: the REPL, `run-script` and a
//! kernel, in that order. Then the same after the engine's file times move (older and newer
//! than the sources), with the disk full during a build (where the test may mount a small
//! tmpfs), after a publish killed half-way, and with proc macros from another build, a library
//! cut short and one deleted (issue 38's fault made every start fail with "can't find crate").

#[path = "support/skipped.rs"]
mod skipped;
#[path = "support/user_env.rs"]
mod user_env;
#[path = "../engine/tests/support/venv.rs"]
mod venv;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use user_env::user_command;

const BIN: &str = env!("CARGO_BIN_EXE_placelab");
/// Kernels opened at once on the empty cache: a class's first minute.
const CLASS: usize = 8;
/// Seconds a kernel may take to start and answer its first cell, the engine's build included.
/// Alone on two cores a class's first answers came 213 s after it opened; in CI the build shares
/// them with the other lanes' builds and sessions, and once took over 900 s (benches/RESULTS.md).
const ENGINE_BUILD_WAIT: u32 = 2400;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Under the home folder, as a user's `~/.cache/placelab` is, beside the toolchain (rustup's
/// `~/.rustup`). evcxr's dylibs find `libstd` through run paths relative to where they were
/// compiled, and a session compiles one level deeper under the cache than the engine it publishes
/// to: from a cache under the repository's `target`, deep below `/`, the surplus ".." collapse
/// at the root and the wrong path still reached the toolchain, which hid the fault from this
/// test while every user's second start failed with "can't find crate for `placelab`".
fn cache() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME is set");
    PathBuf::from(home).join(".cache/placelab-test-second-start")
}

fn engine() -> PathBuf {
    cache().join("engine/work")
}

fn said(out: &std::process::Output) -> String {
    format!(
        "exit {:?}\n{}\n--- stderr ---\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `run-script` of a one-cell script; its output, asserted to have answered.
fn run_script(mut command: Command) -> String {
    let script = repo().join("tests/scripts/one_cell.plrs");
    let out = command
        .args(["run-script"])
        .arg(&script)
        .env("PLACELAB_CACHE", cache())
        .output()
        .expect("placelab starts");
    let text = said(&out);
    assert!(out.status.success(), "run-script failed:\n{text}");
    assert!(text.contains("[1., 1., 1.]"), "no answer:\n{text}");
    assert!(!text.contains("can't find crate"), "{text}");
    text
}

/// The REPL with `1 + 1` typed ahead on its input: it answers 2 and exits 0.
fn repl() -> String {
    let mut child = user_command(BIN)
        .env("PLACELAB_CACHE", cache())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the REPL starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"1 + 1\n:exit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = said(&out);
    assert!(out.status.success(), "the REPL failed:\n{text}");
    assert!(text.lines().any(|l| l.trim() == "2"), "no answer:\n{text}");
    text
}

/// The Python of the Jupyter venv, and a kernelspec installed the way the README says.
fn jupyter() -> (PathBuf, PathBuf) {
    let python = venv::pinned_venv(
        &repo().join("target/jupyter-venv"),
        &std::fs::read_to_string(repo().join("tests/jupyter/requirements.txt")).unwrap(),
        &[
            "-r".as_ref(),
            repo().join("tests/jupyter/requirements.txt").as_os_str(),
        ],
    )
    .expect("the Jupyter venv");
    let prefix = cache().join("jupyter");
    let out = user_command(BIN)
        .args([
            "install-kernel",
            "--name",
            "placelab-second-start",
            "--prefix",
        ])
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
    (python, prefix)
}

/// `n` kernels started by jupyter_client at once, from `python` (a `Command` with the
/// environment to start them in): each runs `1 + 1` and must answer 2. What they printed, their
/// logs included.
fn kernels(n: usize, mut python: Command, prefix: &Path) -> String {
    let client = r#"
import asyncio, sys
from jupyter_client.manager import start_new_async_kernel

WAIT = float(sys.argv[2])

async def one(i):
    km, kc = await start_new_async_kernel(kernel_name="placelab-second-start", startup_timeout=WAIT)
    seen = []
    def hook(msg):
        c = msg["content"]
        seen.append(str(c.get("data", {}).get("text/plain", "")) + c.get("text", "") + c.get("evalue", ""))
    try:
        reply = await kc.execute_interactive("1 + 1", timeout=WAIT, output_hook=hook)
        return reply["content"]["status"], "".join(seen)
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)

async def main():
    for i, (status, seen) in enumerate(await asyncio.gather(*(one(i) for i in range(int(sys.argv[1]))))):
        print(f"kernel {i}: {status}: {seen!r}")

asyncio.run(main())
"#;
    let out = python
        .args(["-c", client, &n.to_string(), &ENGINE_BUILD_WAIT.to_string()])
        .env("PLACELAB_CACHE", cache())
        .env("JUPYTER_PATH", prefix.join("share/jupyter"))
        .env("JUPYTER_RUNTIME_DIR", cache().join("jupyter-runtime"))
        .output()
        .unwrap();
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    for i in 0..n {
        // A cell sent while the kernel starts is told so, then answered.
        let answered = text.lines().any(|l| {
            l.starts_with(&format!("kernel {i}: ok: "))
                && (l.ends_with("'2'") || l.ends_with("\\n2'"))
        });
        assert!(answered, "kernel {i} did not answer 2:\n{text}");
    }
    text
}

/// Says how far the test has come and when (shown with a failure, to tell a slow step from a
/// stuck one).
fn reached(started: std::time::Instant, what: &str) {
    eprintln!(
        "second_start: {:.0} s: {what}",
        started.elapsed().as_secs_f64()
    );
}

/// A seed for the moments of the kills below: `PLACELAB_SOAK_SEED` replays a run, else the clock.
fn seed() -> u64 {
    let seed = std::env::var("PLACELAB_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
                .into()
        });
    eprintln!(
        "second_start: kill moments from seed {seed} (PLACELAB_SOAK_SEED={seed} replays them)"
    );
    seed
}

/// A moment in `lo..hi` seconds, from `state` (xorshift64).
fn moment(state: &mut u64, lo: f64, hi: f64) -> std::time::Duration {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    let unit = (*state >> 11) as f64 / (1u64 << 53) as f64;
    std::time::Duration::from_secs_f64(lo + unit * (hi - lo))
}

/// Starts `command` in a process group of its own and, after `after`, kills the whole group
/// with SIGKILL (as Jupyter kills a kernel, or a closed terminal or the OOM killer ends a
/// session): placelab, its cargo and rustc, its cell process. Returns once none is left.
fn kill_while_building(mut command: Command, after: std::time::Duration, what: &str) {
    use std::os::unix::process::CommandExt;
    let mut child = command
        .env("PLACELAB_CACHE", cache())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("placelab starts");
    let group = child.id() as i32;
    std::thread::sleep(after);
    let finished = child.try_wait().unwrap().is_some();
    // SAFETY: signals a process group this test started.
    unsafe { libc::killpg(group, libc::SIGKILL) };
    child.wait().unwrap();
    // SAFETY: signal 0 only asks whether any process of the group is left.
    while unsafe { libc::killpg(group, 0) } == 0 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    eprintln!(
        "second_start: {what} killed after {:.1} s{}",
        after.as_secs_f64(),
        if finished {
            " (it had already ended)"
        } else {
            ""
        }
    );
}

/// A folder on a small file system of its own (a tmpfs of `mib` MiB), where a build runs out of
/// space; `None` where this test may not mount one (it needs root).
fn small_disk(mib: u32) -> Option<PathBuf> {
    let dir = cache().with_file_name("placelab-test-small-disk");
    let _ = Command::new("umount")
        .arg(&dir)
        .stderr(Stdio::null())
        .status();
    std::fs::create_dir_all(&dir).ok()?;
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
        .arg(&dir)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if mounted {
        Some(dir)
    } else {
        skipped::report(
            "second_start",
            "a build on a full disk",
            "this machine does not let the test mount a small tmpfs (it needs root)",
        );
        let _ = std::fs::remove_dir(&dir);
        None
    }
}

/// Sets every file's modification time under `dir` (`touch -d WHEN`).
fn touch_all(dir: &Path, when: &str) {
    let ok = Command::new("find")
        .arg(dir)
        .args(["-type", "f", "-exec", "touch", "-d", when, "{}", "+"])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn every_start_after_the_first_works() {
    let started = std::time::Instant::now();
    let _ = std::fs::remove_dir_all(cache());
    std::fs::create_dir_all(cache()).unwrap();

    // The first sessions, in cargo's environment (this test's own, as cargo test gives it): a
    // cold class, eight kernels opened at once on the empty cache. One builds the engine; the
    // others wait for it and link to it, and every one answers.
    assert!(
        std::env::var_os("CARGO_MANIFEST_DIR").is_some(),
        "cargo's environment"
    );
    // A first session killed while it builds the engine, then a prebuild killed while it
    // builds; at random moments. What they leave must not break the class that follows.
    let mut state = seed().max(1);
    let one_cell = repo().join("tests/scripts/one_cell.plrs");
    let mut first = user_command(BIN);
    first.arg("run-script").arg(&one_cell);
    kill_while_building(first, moment(&mut state, 1.0, 60.0), "a first session");
    let mut prebuild = user_command(BIN);
    prebuild.arg("prebuild");
    kill_while_building(prebuild, moment(&mut state, 1.0, 60.0), "a prebuild");

    // On a machine fast enough, the prebuild published the engine before its kill.
    let builds = usize::from(!engine().join("MANIFEST").is_file());

    let (python, prefix) = jupyter();
    reached(started, "a class opens its kernels");
    let class = kernels(CLASS, Command::new(&python), &prefix);
    reached(started, "the class answered");
    assert_eq!(
        class
            .lines()
            .filter(|l| l.ends_with("compiling placelab"))
            .count(),
        builds,
        "one build of the engine for the whole class:\n{class}"
    );
    assert_eq!(
        class.matches("this one waits for it").count(),
        builds * (CLASS - 1),
        "{class}"
    );
    assert!(
        engine().join("MANIFEST").is_file(),
        "the first session published the engine"
    );
    let left: Vec<String> = std::fs::read_dir(cache().join("engine"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name == ".prebuild" || name.contains(".new-") || name.contains(".old-"))
        .collect();
    assert!(left.is_empty(), "left by the killed builds: {left:?}");

    // Then as a user starts it: the REPL, run-script, a kernel.
    repl();
    run_script(user_command(BIN));
    kernels(1, user_command(&python), &prefix);
    reached(
        started,
        "the REPL, run-script and a kernel answered as a user starts them",
    );

    // The engine's files older than the sources: placelab is compiled again, in the session.
    // First with the session's folder on a small disk that fills during that compile: it says
    // so in one sentence, with the command that shows the space, and breaks nothing. Then with
    // space again: it compiles and publishes; then, the engine newer than everything, nothing is
    // compiled.
    touch_all(&engine(), "2001-01-01");
    if let Some(small) = small_disk(16) {
        let out = user_command(BIN)
            .arg("run-script")
            .arg(&one_cell)
            .env("PLACELAB_CACHE", &small)
            .env("PLACELAB_ENGINE", cache().join("engine"))
            .output()
            .unwrap();
        let _ = Command::new("umount").arg(&small).status();
        let _ = std::fs::remove_dir(&small);
        let text = said(&out);
        assert!(!out.status.success(), "{text}");
        assert!(
            text.contains("is full (No space left on device)") && text.contains("df -h"),
            "{text}"
        );
        assert!(!text.contains("can't find crate"), "{text}");
    }
    run_script(user_command(BIN));
    reached(
        started,
        "placelab compiled again for an engine older than its sources",
    );
    touch_all(&engine(), "+1 hour");
    let text = run_script(user_command(BIN));
    assert!(!text.contains("cannot be used"), "{text}");

    // A publish killed between its two renames: the old build renamed away, the new one not yet
    // in place. The next start puts the old one back.
    let killed = cache().join("engine/work.old-999999999");
    std::fs::rename(engine(), &killed).unwrap();
    std::fs::create_dir_all(cache().join("engine/work.new-999999998/target")).unwrap();
    run_script(user_command(BIN));
    assert!(engine().join("MANIFEST").is_file() && !killed.exists());
    assert!(!cache().join("engine/work.new-999999998").exists());
    reached(started, "a publish killed half-way was put back");

    // Proc macros from another build (the fault of issue 38), by hand: same names, other
    // bytes; and, in the same engine, one target library cut short and one deleted. The session
    // says so in one line and builds the engine again; the next start links to that.
    let target_deps = std::fs::read_dir(engine().join("target"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("debug/deps"))
        .find(|d| d.is_dir() && !d.starts_with(engine().join("target/debug")))
        .expect("the target's libraries");
    let library = |prefix: &str, ext: &str| {
        std::fs::read_dir(&target_deps)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy();
                name.starts_with(prefix) && name.ends_with(ext)
            })
            .unwrap_or_else(|| panic!("no {prefix}*{ext} in {}", target_deps.display()))
    };
    let half = library("libhalf-", ".rlib");
    let len = std::fs::metadata(&half).unwrap().len();
    std::fs::File::options()
        .write(true)
        .open(&half)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    std::fs::remove_file(library("librayon-", ".rmeta")).unwrap();
    let deps = engine().join("target/debug/deps");
    for entry in std::fs::read_dir(&deps).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".so") && name.contains("derive") {
            let mut bytes = std::fs::read(entry.path()).unwrap();
            bytes.extend_from_slice(b"another build");
            std::fs::remove_file(entry.path()).unwrap();
            std::fs::write(entry.path(), bytes).unwrap();
        }
    }
    let text = run_script(user_command(BIN));
    let notice = "cannot be used: debug/deps/lib";
    assert_eq!(
        text.matches(notice).count(),
        2,
        "said once at the start, once with the first cell:\n{text}"
    );
    assert!(text.contains("This session builds it again"), "{text}");
    reached(started, "an engine with broken libraries was built again");
    let text = run_script(user_command(BIN));
    assert!(!text.contains("cannot be used"), "{text}");
    let _ = std::fs::remove_dir_all(cache());
}
