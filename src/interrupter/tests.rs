//! The interrupter's rules, on stand-in processes: which cell an interrupt reaches.

use super::*;
use std::os::unix::process::ExitStatusExt;

/// A stand-in for the cell's process: `sleep`, which SIGINT ends.
fn cell_process() -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let mut sleep = std::process::Command::new("sleep");
    sleep.arg("60");
    // A job a shell puts in the background (as CI's lanes are) starts with SIGINT ignored,
    // and its children inherit that; the real cell process installs its own handler.
    // SAFETY: only `signal`, which is async-signal-safe, between fork and exec.
    unsafe {
        sleep.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        })
    };
    sleep.spawn().unwrap()
}

/// The tests below start processes this process's interrupts may take for a compiler:
/// one at a time.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A stand-in for evcxr's cargo: `sleep` under the name `cargo`, a child of this process.
fn compiler_process() -> std::process::Child {
    let sleep = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("sleep"))
        .find(|p| p.is_file())
        .expect("`sleep` is on PATH");
    let dir = std::env::temp_dir().join(format!("placelab-interrupter-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cargo = dir.join("cargo");
    std::fs::copy(sleep, &cargo).unwrap();
    let child = std::process::Command::new(&cargo)
        .arg("60")
        .spawn()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    child
}

/// A cell asked for by a client of session `session` at `sent_us`, after `sigints` SIGINTs.
fn asked(session: &str, sent_us: i64, sigints: u64) -> CellRequest {
    CellRequest {
        sigints,
        stamp: Some(stamp(session, sent_us)),
    }
}

fn stamp(session: &str, sent_us: i64) -> Stamp {
    Stamp {
        session: session.into(),
        sent_us: Some(sent_us),
    }
}

fn client(session: &str, sent_us: i64) -> Asker {
    Asker::Client(stamp(session, sent_us))
}

#[test]
fn a_compile_that_starts_after_the_interrupt_is_stopped_and_said_to_be() {
    let _one = one_at_a_time();
    let interrupter = Interrupter::default();
    let r = &interrupter.running;
    let mut process = cell_process();
    assert!(!interrupter.job_begins(&CellRequest::default()));
    assert!(r.begin(process.id() as i32, r.next_run(), true));
    // The interrupt finds no compiler yet (evcxr starts cargo after its own work).
    assert_eq!(interrupter.interrupt(&Asker::Kernel), Stopped::Running);
    assert!(!r.compile_stopped.load(Ordering::Acquire));
    let mut cargo = compiler_process();
    // The grace period's check stops it, and says so before the cell can end: the session
    // then reports an interrupted compile, not the warnings rustc had printed.
    assert_eq!(cargo.wait().unwrap().signal(), Some(libc::SIGKILL));
    r.end();
    interrupter.job_ends();
    assert!(r.compile_stopped.load(Ordering::Acquire));
    process.wait().unwrap();
}

#[test]
fn an_interrupt_reaches_the_running_cell_and_never_a_cell_that_ended() {
    let _one = one_at_a_time();
    let interrupter = Interrupter::default();
    let r = &interrupter.running;
    let mut process = cell_process();
    let pid = process.id() as i32;
    assert!(!interrupter.job_begins(&CellRequest::default()));
    assert!(r.begin(pid, r.next_run(), true));
    r.end();
    // As the cell ends: nothing runs any more, and nothing that follows is stopped.
    assert_eq!(interrupter.interrupt(&Asker::Kernel), Stopped::BeforeItRan);
    interrupter.job_ends();
    assert_eq!(interrupter.interrupt(&Asker::Kernel), Stopped::NoCell);
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        process.try_wait().unwrap().is_none(),
        "the process of a cell that had ended was signalled"
    );
    assert_eq!(r.next_run(), 2);
    assert!(!interrupter.job_begins(&CellRequest::default()));
    assert!(r.begin(pid, 2, true));
    assert_eq!(interrupter.interrupt(&Asker::Kernel), Stopped::Running);
    assert!(r.requested.load(Ordering::Acquire));
    assert_eq!(process.wait().unwrap().signal(), Some(libc::SIGINT));
    r.end();
    interrupter.job_ends();
}

#[test]
fn an_interrupt_before_an_asked_cell_begins_stops_all_of_it() {
    let _one = one_at_a_time();
    let interrupter = Interrupter::default();
    let r = &interrupter.running;
    let mut process = cell_process();
    let first = asked("client", 10, 0);
    interrupter.cell_asked(first.clone());
    assert_eq!(
        interrupter.interrupt(&client("client", 20)),
        Stopped::BeforeItRan
    );
    assert!(interrupter.job_begins(&first), "an asked cell is stopped");
    interrupter.job_ends();
    // The next cell runs, and its process was never signalled.
    let next = asked("client", 30, 0);
    interrupter.cell_asked(next.clone());
    assert!(!interrupter.job_begins(&next));
    assert!(r.begin(process.id() as i32, r.next_run(), true));
    assert!(process.try_wait().unwrap().is_none());
    r.end();
    interrupter.job_ends();
    process.kill().unwrap();
    process.wait().unwrap();
}

/// Jupyter keeps no order between the control and shell channels: the kernel may read a
/// client's second interrupt for a cell that has ended after the next cell's request.
#[test]
fn a_client_interrupt_sent_before_the_cell_was_asked_for_stops_nothing() {
    let _one = one_at_a_time();
    let interrupter = Interrupter::default();
    let r = &interrupter.running;
    let mut process = cell_process();
    let next = asked("client", 30, 0);
    interrupter.cell_asked(next.clone());
    assert_eq!(
        interrupter.interrupt(&client("client", 20)),
        Stopped::NotMeantForIt
    );
    assert!(!interrupter.job_begins(&next));
    assert!(r.begin(process.id() as i32, r.next_run(), true));
    assert_eq!(
        interrupter.interrupt(&client("client", 25)),
        Stopped::NotMeantForIt
    );
    assert!(!r.requested.load(Ordering::Acquire));
    assert!(process.try_wait().unwrap().is_none());
    // Another client's clock says nothing of this one's: its interrupt counts.
    assert_eq!(
        interrupter.interrupt(&client("server", 1)),
        Stopped::Running
    );
    assert_eq!(process.wait().unwrap().signal(), Some(libc::SIGINT));
    r.end();
    interrupter.job_ends();
}

/// The reverse: an interrupt its client sent after the cell, read by the kernel first.
#[test]
fn a_client_interrupt_read_before_the_cell_it_was_sent_after_stops_it() {
    let interrupter = Interrupter::default();
    assert_eq!(
        interrupter.interrupt(&client("client", 20)),
        Stopped::NoCell
    );
    let sent_before = asked("client", 10, 0);
    interrupter.cell_asked(sent_before.clone());
    assert!(interrupter.job_begins(&sent_before));
    interrupter.job_ends();
    // An idle interrupt stops no later cell, nor one of another client.
    for (session, sent) in [("client", 40), ("other", 5)] {
        assert_eq!(
            interrupter.interrupt(&client("client", 30)),
            Stopped::NoCell
        );
        let cell = asked(session, sent, 0);
        interrupter.cell_asked(cell.clone());
        assert!(!interrupter.job_begins(&cell), "{session} at {sent}");
        interrupter.job_ends();
    }
}

/// A terminal's Ctrl-C pressed twice: the second, counted before the next cell was entered,
/// is not for it, however late the shell's watcher sees it.
#[test]
fn a_sigint_counted_before_the_cell_was_asked_for_stops_nothing() {
    let interrupter = Interrupter::default();
    let cell = CellRequest {
        sigints: 2,
        stamp: None,
    };
    assert!(!interrupter.job_begins(&cell));
    for n in [1, 2] {
        assert_eq!(
            interrupter.interrupt(&Asker::Signal(n)),
            Stopped::NotMeantForIt
        );
    }
    assert_eq!(
        interrupter.interrupt(&Asker::Signal(3)),
        Stopped::BeforeItRan
    );
    interrupter.job_ends();
}
