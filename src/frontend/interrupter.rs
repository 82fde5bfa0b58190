//! Stopping the running cell from any thread (Ctrl-C, Jupyter's interrupt): the compiler while
//! the cell compiles, else SIGINT to the cell's process, and SIGKILL only after the grace period.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// SIGINTs this process received since `catch_sigint` (a signal handler may only touch atomics).
static SIGINTS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_sigint(_: libc::c_int) {
    SIGINTS.fetch_add(1, Ordering::Relaxed);
}

/// From now on SIGINT (a terminal's Ctrl-C, or a client using interrupt_mode "signal") is
/// counted instead of ending the process; a shell's watcher turns it into an interrupt.
pub fn catch_sigint() {
    // SAFETY: the handler only adds to an atomic.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
}

/// How many SIGINTs have arrived so far.
pub fn sigints() -> u64 {
    SIGINTS.load(Ordering::Relaxed)
}

use std::time::Duration;

/// Stops the cell that is running, from any thread. It first *asks*: SIGINT makes the cell's
/// engine ops return `Error::Interrupted`, so tensor work ends within an op and every variable of
/// earlier cells survives. A cell still running after the grace period (a loop with no tensor op
/// to stop at) has its process killed, and the session says which variables were lost.
#[derive(Debug, Clone, Default)]
pub struct Interrupter {
    pub(super) running: Arc<RunningCell>,
}

#[derive(Debug, Default)]
pub(super) struct RunningCell {
    /// The running cell. An interrupt reads it and acts on that cell's process under this lock,
    /// and a cell begins and ends under it: so nothing an interrupt does reaches the next cell
    /// (the soak saw the SIGINT for a cell stopped before it began reach the next one).
    slot: Mutex<Slot>,
    /// Set when the grace period ran out and the process was killed.
    pub(super) killed: AtomicBool,
    /// Set when the interrupt came while the cell compiled, and the compiler was stopped.
    pub(super) compile_stopped: AtomicBool,
    /// Set when the user interrupted the running cell (by any route).
    pub(super) requested: AtomicBool,
    /// How many SIGINTs had arrived when the running cell started.
    pub(super) sigints_at_start: AtomicU64,
    /// A kernel's cells sent to the evaluator and not yet begun.
    queued: AtomicU64,
    /// The evaluator runs a job (a cell or a command) the kernel sent.
    in_job: AtomicBool,
    /// An interrupt came for a cell sent but not yet running: none of it will run.
    stop_before_start: AtomicBool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Slot {
    /// The cell process while a cell runs, else 0.
    pid: i32,
    /// Counts cells: the number of the one running, or of the last.
    cell: u64,
    /// The cell process knows `cell` (`begin` reached it), so a SIGINT names it.
    named: bool,
}

impl RunningCell {
    /// The number the next cell will have, for the `begin` its process is told first.
    pub(super) fn next_cell(&self) -> u64 {
        self.slot().cell + 1
    }

    /// Cell `cell` runs in process `pid` (`named`: its process was told the number); false,
    /// and nothing runs, if an interrupt already stopped it.
    pub(super) fn begin(&self, pid: i32, cell: u64, named: bool) -> bool {
        let mut slot = self.slot();
        self.killed.store(false, Ordering::Release);
        self.compile_stopped.store(false, Ordering::Release);
        self.requested.store(false, Ordering::Release);
        *slot = Slot { pid, cell, named };
        if self.stop_before_start.swap(false, Ordering::SeqCst) {
            slot.pid = 0;
            return false;
        }
        true
    }

    /// The cell has ended: no interrupt reaches its process any more.
    pub(super) fn end(&self) {
        self.slot().pid = 0;
    }

    fn slot(&self) -> MutexGuard<'_, Slot> {
        // The slot is three plain values, whole after any panic.
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How long an interrupted cell may take to stop before its process is killed:
/// `PLACELAB_INTERRUPT_GRACE` seconds, 2 by default.
pub fn interrupt_grace() -> Duration {
    std::env::var("PLACELAB_INTERRUPT_GRACE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(Duration::from_secs(2), Duration::from_secs_f64)
}

impl Interrupter {
    /// For the SIGINT counted as number `count` (`sigints()`): interrupts the running cell only
    /// if it started before that signal. A terminal's Ctrl-C reaches cargo, rustc and the cell's
    /// process directly too, so the interrupted cell may have ended, and a cell typed ahead
    /// begun to compile, before the signal is seen here. Returns whether a cell was interrupted.
    pub fn interrupt_for_sigint(&self, count: u64) -> bool {
        if self.running.sigints_at_start.load(Ordering::Acquire) >= count {
            return false;
        }
        self.interrupt()
    }

    /// A kernel's cell is on its way to the evaluator: an interrupt from now on stops it, even
    /// before it begins (Jupyter sends an interrupt on another channel than the cell, and the
    /// soak saw one arrive first: the cell then ran on, unstopped).
    pub fn cell_sent(&self) {
        self.running.queued.fetch_add(1, Ordering::SeqCst);
    }

    /// The evaluator takes a job; whether an interrupt already stopped it.
    pub(super) fn job_begins(&self) -> bool {
        let r = &self.running;
        // Only a cell the kernel sent: the REPL's Ctrl-C reaches the cell it meant by its own
        // route (`interrupt_for_sigint`), never one typed ahead.
        let sent = r
            .queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| q.checked_sub(1))
            .is_ok();
        r.in_job.store(sent, Ordering::SeqCst);
        r.stop_before_start.swap(false, Ordering::SeqCst)
    }

    /// The job is done: a late stop request is forgotten.
    pub(super) fn job_ends(&self) {
        self.running.in_job.store(false, Ordering::SeqCst);
        self.running
            .stop_before_start
            .store(false, Ordering::SeqCst);
    }

    /// Returns whether a cell was running, or sent and about to run.
    pub fn interrupt(&self) -> bool {
        let r = &self.running;
        // Held until the cell is signalled: the cell cannot end and the next begin meanwhile.
        let slot = r.slot();
        if slot.pid <= 0 {
            if r.queued.load(Ordering::SeqCst) == 0 && !r.in_job.load(Ordering::SeqCst) {
                return false;
            }
            r.stop_before_start.store(true, Ordering::SeqCst);
            return true;
        }
        let target = *slot;
        r.requested.store(true, Ordering::Release);
        // While the cell compiles none of it runs yet: stop the compiler, and leave the cell's
        // process (and every variable in it) alone.
        let compilers = compile_processes();
        if !compilers.is_empty() {
            r.compile_stopped.store(true, Ordering::Release);
            kill_all(&compilers);
        }
        // The cell's process is asked as well: a compile seen ending may still finish, and the
        // cell then stops at its first tensor op (the soak found such cells running on, with
        // nothing left to stop them). An idle process only raises its flag, which the next cell
        // lowers.
        signal_cell(target);
        drop(slot);
        let running = self.running.clone();
        std::thread::spawn(move || {
            for round in 1.. {
                std::thread::sleep(interrupt_grace());
                let slot = running.slot();
                if *slot != target {
                    return;
                }
                // Still compiling (evcxr compiles some cells twice, and a compile may start
                // after the interrupt): stop the compiler again rather than lose every variable
                // for a cell that never ran. Said under the lock, before the cell can end: the
                // soak saw a compiler stopped here reported as the warning it had printed.
                let compilers = compile_processes();
                if !compilers.is_empty() && round < 5 {
                    running.compile_stopped.store(true, Ordering::Release);
                    kill_all(&compilers);
                    continue;
                }
                running.killed.store(true, Ordering::Release);
                // SAFETY: signalling the cell's process while the same cell still runs (the
                // lock is held).
                unsafe { libc::kill(target.pid, libc::SIGKILL) };
                return;
            }
        });
        true
    }
}

/// SIGINT to the running cell's process, naming the cell where its process knows the number:
/// a signal handled late, once the next cell began, is then ignored there (`interrupt.rs`).
fn signal_cell(target: Slot) {
    // SAFETY: signalling the cell's process, recorded when the cell began; it still runs.
    unsafe {
        if target.named {
            let value = libc::sigval {
                sival_ptr: target.cell as usize as *mut libc::c_void,
            };
            libc::sigqueue(target.pid, libc::SIGINT, value);
        } else {
            libc::kill(target.pid, libc::SIGINT);
        }
    }
}

fn kill_all(compilers: &[i32]) {
    for &c in compilers {
        // SAFETY: signalling a cargo or rustc process this process started.
        unsafe { libc::kill(c, libc::SIGKILL) };
    }
}

/// The cargo and rustc processes descended from this one that are still running (a zombie has
/// ended: it only waits to be reaped), with every process they started: evcxr compiling a cell.
/// Read from `/proc` (`pid (comm) state ppid …` in each `stat`); empty where there is none.
fn compile_processes() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let procs: Vec<(i32, i32, String)> = entries
        .filter_map(|e| {
            let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (head, tail) = stat.rsplit_once(')')?;
            let comm = head.split_once('(')?.1.to_string();
            let mut fields = tail.split_whitespace();
            let ended = fields.next()? == "Z";
            let ppid = fields.next()?.parse().ok()?;
            Some((pid, ppid, if ended { String::new() } else { comm }))
        })
        .collect();
    // The compilers below this process, then everything below them: a linker (`cc`, `ld`) that
    // outlived a killed rustc went on writing the cell's library while the next cell's compile
    // wrote it too (the soak saw "Error renaming …/libctx.so": no such file).
    let below = |roots: Vec<i32>| {
        let mut found = roots;
        let mut grew = true;
        while grew {
            grew = false;
            for (pid, ppid, _) in &procs {
                if found.contains(ppid) && !found.contains(pid) {
                    found.push(*pid);
                    grew = true;
                }
            }
        }
        found
    };
    let ours = below(vec![std::process::id() as i32]);
    let compilers = procs
        .iter()
        .filter(|(pid, _, comm)| {
            ours[1..].contains(pid) && matches!(comm.as_str(), "cargo" | "rustc")
        })
        .map(|(pid, ..)| *pid)
        .collect();
    below(compilers)
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn a_compile_that_starts_after_the_interrupt_is_stopped_and_said_to_be() {
        let _one = one_at_a_time();
        let interrupter = Interrupter::default();
        let r = &interrupter.running;
        let mut process = cell_process();
        assert!(r.begin(process.id() as i32, r.next_cell(), true));
        // The interrupt finds no compiler yet (evcxr starts cargo after its own work).
        assert!(interrupter.interrupt());
        assert!(!r.compile_stopped.load(Ordering::Acquire));
        let mut cargo = compiler_process();
        // The grace period's check stops it, and says so before the cell can end: the session
        // then reports an interrupted compile, not the warnings rustc had printed.
        assert_eq!(cargo.wait().unwrap().signal(), Some(libc::SIGKILL));
        r.end();
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
        assert!(r.begin(pid, r.next_cell(), true));
        r.end();
        assert!(!interrupter.interrupt(), "no cell runs, none is sent");
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            process.try_wait().unwrap().is_none(),
            "the process of a cell that had ended was signalled"
        );
        assert_eq!(r.next_cell(), 2);
        assert!(r.begin(pid, 2, true));
        assert!(interrupter.interrupt());
        assert!(r.requested.load(Ordering::Acquire));
        assert_eq!(process.wait().unwrap().signal(), Some(libc::SIGINT));
        r.end();
    }

    #[test]
    fn an_interrupt_before_a_sent_cell_begins_stops_all_of_it() {
        let _one = one_at_a_time();
        let interrupter = Interrupter::default();
        let r = &interrupter.running;
        let mut process = cell_process();
        interrupter.cell_sent();
        assert!(!interrupter.job_begins());
        assert!(interrupter.interrupt(), "a sent cell is stopped");
        assert!(!r.begin(process.id() as i32, r.next_cell(), true));
        interrupter.job_ends();
        // The next cell runs, and its process was never signalled.
        interrupter.cell_sent();
        assert!(!interrupter.job_begins());
        assert!(r.begin(process.id() as i32, r.next_cell(), true));
        assert!(process.try_wait().unwrap().is_none());
        r.end();
        interrupter.job_ends();
        process.kill().unwrap();
        process.wait().unwrap();
    }
}
