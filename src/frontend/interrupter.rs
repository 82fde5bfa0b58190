//! Stopping the running cell from any thread (Ctrl-C, Jupyter's interrupt): the compiler while
//! the cell compiles, else SIGINT to the cell's process, and SIGKILL only after the grace period.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

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
    /// The cell process while a cell runs, else 0.
    pub(super) pid: AtomicI32,
    /// Counts cells, so a late kill never hits the next one.
    pub(super) cell: AtomicU64,
    /// Set when the grace period ran out and the process was killed.
    pub(super) killed: AtomicBool,
    /// Set when the interrupt came while the cell compiled, and the compiler was stopped.
    pub(super) compile_stopped: AtomicBool,
    /// Set when the user interrupted the running cell (by any route).
    pub(super) requested: AtomicBool,
    /// How many SIGINTs had arrived when the running cell started.
    pub(super) sigints_at_start: AtomicU64,
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

    /// Returns whether a cell was running.
    pub fn interrupt(&self) -> bool {
        let pid = self.running.pid.load(Ordering::Acquire);
        if pid <= 0 {
            return false;
        }
        self.running.requested.store(true, Ordering::Release);
        // While the cell compiles none of it runs yet: stop the compiler, and leave the cell's
        // process (and every variable in it) alone. A kill after the grace would lose them all
        // for a cell that never ran.
        let compilers = compile_processes();
        if !compilers.is_empty() {
            self.running.compile_stopped.store(true, Ordering::Release);
            for c in compilers {
                // SAFETY: signalling a cargo or rustc process this process started.
                unsafe { libc::kill(c, libc::SIGKILL) };
            }
            return true;
        }
        let cell = self.running.cell.load(Ordering::Acquire);
        // SAFETY: signalling the cell's process, whose pid we recorded when the cell started.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let running = self.running.clone();
        std::thread::spawn(move || {
            std::thread::sleep(interrupt_grace());
            let same = running.pid.load(Ordering::Acquire) == pid
                && running.cell.load(Ordering::Acquire) == cell;
            if same {
                running.killed.store(true, Ordering::Release);
                // SAFETY: as above; the same cell is still running.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        });
        true
    }
}

/// The cargo and rustc processes descended from this one: evcxr compiling a cell. Read from
/// `/proc` (`pid (comm) state ppid …` in each `stat`); empty where there is none.
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
            let ppid = tail.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid, comm))
        })
        .collect();
    let mut ours = vec![std::process::id() as i32];
    let mut grew = true;
    while grew {
        grew = false;
        for (pid, ppid, _) in &procs {
            if ours.contains(ppid) && !ours.contains(pid) {
                ours.push(*pid);
                grew = true;
            }
        }
    }
    procs
        .into_iter()
        .filter(|(pid, _, comm)| {
            ours[1..].contains(pid) && matches!(comm.as_str(), "cargo" | "rustc")
        })
        .map(|(pid, ..)| pid)
        .collect()
}
