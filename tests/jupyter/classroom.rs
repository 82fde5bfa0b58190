//! A class through a real JupyterHub (tests/classroom): learners log in at once through the
//! Hub's REST API, each runs notebook 01 in a placelab kernel that links to one shared engine,
//! and one learner's kernel is killed and must come back saying so. Then the Kubernetes files
//! (kernelspec/classroom) are linted and checked against the measured sizes.
//!
//! Two learners by default; `PLACELAB_CLASS_SIZE=8 cargo test --test jupyter classroom` for a
//! class (benches/RESULTS.md has its figures). The work is done by tests/classroom/run.sh.

use std::process::Command;

use super::{one_kernel_at_a_time, root, session_cache, skipped, target, warm_session_cache};

#[test]
fn a_class_logs_in_through_jupyterhub_and_shares_one_engine() {
    if skipped() {
        return;
    }
    let _one = one_kernel_at_a_time();
    // The admin's prebuild finds the engine fresh when it starts from this machine's build: a
    // copy of the session cache's engine (under a second), made anew each run. A copy kept from
    // an earlier run (CI's warm target/) would be stale, and the prebuild would build the engine
    // a second time in this run.
    warm_session_cache();
    let engine = target().join("classroom/engine");
    std::fs::create_dir_all(engine.parent().unwrap()).unwrap();
    if engine.exists() {
        // The shared engine is read-only, as the prebuild leaves it.
        let writable = Command::new("chmod")
            .arg("-R")
            .arg("u+w")
            .arg(&engine)
            .status();
        assert!(
            writable.is_ok_and(|s| s.success()),
            "cannot make {engine:?} writable"
        );
        std::fs::remove_dir_all(&engine)
            .unwrap_or_else(|e| panic!("cannot remove the last run's {engine:?}: {e}"));
    }
    let copied = Command::new("cp")
        .args(["-a", "--reflink=auto"])
        .arg(session_cache().join("engine"))
        .arg(&engine)
        .status();
    assert!(copied.is_ok_and(|s| s.success()), "cannot copy the engine");
    let learners = std::env::var("PLACELAB_CLASS_SIZE").unwrap_or_else(|_| "2".into());
    let out = crate::user_command(root().join("tests/classroom/run.sh"))
        .args(["--learners", &learners])
        .env("PLACELAB_BIN", env!("CARGO_BIN_EXE_placelab"))
        .output()
        .expect("run.sh runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the class did not go well:\n{text}");
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(target().join("classroom/report.json")).expect("the report"),
    )
    .expect("the report is JSON");
    assert_eq!(report["errors"], serde_json::json!({}), "{text}");
    assert!(
        report["disk_per_learner_mib"].as_f64().unwrap() < 50.0,
        "a learner's own disk: {text}"
    );
    let notice = report["restart_notice"].as_str().unwrap_or_default();
    assert!(
        notice.contains("previous kernel of this notebook"),
        "{text}"
    );
    assert!(
        text.contains("deployment: 0 problem(s); hadolint clean: True"),
        "{text}"
    );
    eprintln!("{text}");
}
