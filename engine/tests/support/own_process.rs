//! One test in a process of its own, for settings that are the whole process's (the stand-in
//! devices, the interrupt flag, which GPU contexts exist): the test runs itself again in a new
//! process of its binary, and the first run only checks that one passed.

use std::process::Command;

const MARK: &str = "PLACELAB_OWN_PROCESS";

/// Whether this is test `name`'s own process. When it is not, runs `name` in a new process of
/// this test binary with `env` set, fails with that process's output unless it passed, and
/// returns false: the caller returns.
pub fn in_own_process(name: &str, env: &[(&str, &str)]) -> bool {
    if std::env::var(MARK).is_ok_and(|v| v == name) {
        return true;
    }
    let out = Command::new(std::env::current_exe().expect("the test binary's path"))
        .env(MARK, name)
        .envs(env.iter().copied())
        .args(["--exact", name, "--nocapture"])
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name}, in a process of its own:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    false
}
