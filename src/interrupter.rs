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

/// Who asked for an interrupt: what tells whether it was meant for the cell there now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asker {
    /// The SIGINT this process counted as number `n` (`sigints()`): a terminal's Ctrl-C, or a
    /// client in interrupt_mode "signal". Meant for a cell asked for before it.
    Signal(u64),
    /// A client's `interrupt_request`, stamped by its sender.
    Client(Stamp),
    /// The kernel itself (shutdown, SIGTERM, its starter gone): whatever runs.
    Kernel,
}

/// A client's message: its session and when the client sent it (µs since the epoch, by the
/// client's clock; none when the message has no date). Two dated stamps of one session are
/// comparable; stamps of two sessions are not (JupyterLab sends cells from the browser and
/// interrupts from the server: two clocks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    pub session: String,
    pub sent_us: Option<i64>,
}

impl Stamp {
    /// Whether this message was sent before `other`, as far as can be told.
    fn sent_before(&self, other: &Stamp) -> bool {
        match (self.sent_us, other.sent_us) {
            (Some(a), Some(b)) => self.session == other.session && a < b,
            _ => false,
        }
    }
}

/// When a cell was asked for: the SIGINTs counted by then, and the client's request's stamp.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CellRequest {
    sigints: u64,
    stamp: Option<Stamp>,
}

impl CellRequest {
    /// A cell asked for now, by a client's request stamped `stamp` (none from a terminal).
    pub fn now(stamp: Option<Stamp>) -> CellRequest {
        CellRequest {
            sigints: sigints(),
            stamp,
        }
    }

    /// Whether an interrupt from `asker` can be meant for this cell: not a SIGINT counted before
    /// the cell was asked for, nor a request its client sent before this cell's. Jupyter keeps
    /// no order between the control and shell channels, so the kernel may read an interrupt
    /// sent for a cell that has ended after the next cell's request.
    fn can_be_stopped_by(&self, asker: &Asker) -> bool {
        match asker {
            Asker::Signal(n) => *n > self.sigints,
            Asker::Client(i) => !self.stamp.as_ref().is_some_and(|c| i.sent_before(c)),
            Asker::Kernel => true,
        }
    }
}

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
    /// The user's cell and its process. An interrupt reads it and acts on that cell under this
    /// lock, and a cell is asked for, begins, ends and is done under it: so nothing an interrupt
    /// does reaches another cell than the one it found.
    slot: Mutex<Slot>,
    /// Set when the grace period ran out and the process was killed.
    pub(super) killed: AtomicBool,
    /// Set when the interrupt came while the cell compiled, and the compiler was stopped.
    pub(super) compile_stopped: AtomicBool,
    /// Set when the user interrupted the running cell (by any route).
    pub(super) requested: AtomicBool,
}

#[derive(Debug, Default)]
struct Slot {
    target: Target,
    /// The user's cell, from when it was asked for until its job is done: an interrupt acts on
    /// it only while it is here.
    cell: Option<AskedCell>,
    /// The last client's interrupt that found no cell: a cell its client had sent before it,
    /// read by the kernel after it, is stopped before it begins.
    unclaimed: Option<Stamp>,
}

#[derive(Debug)]
struct AskedCell {
    request: CellRequest,
    /// An interrupt came before the code ran (or between two runs of a magic): none of what is
    /// left of it runs.
    stop: bool,
}

/// What the evaluator runs in the cell's process right now.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Target {
    /// The cell process while code runs, else 0.
    pid: i32,
    /// Counts runs: the number of the one running, or of the last.
    run: u64,
    /// The cell process knows `run` (`begin` reached it), so a SIGINT names it.
    named: bool,
}

/// What an interrupt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The running cell was asked to stop (its compile stopped, its process signalled).
    Running,
    /// A cell asked for and not yet running: none of it will run.
    BeforeItRan,
    /// A cell is there, but the interrupt was sent before it was asked for: nothing stopped.
    NotMeantForIt,
    /// No cell: nothing stopped.
    NoCell,
}

impl Slot {
    /// The cell asked for as `request` is the user's cell now; whether a client's interrupt
    /// that found no cell was sent after it (and so stops it).
    fn ask(&mut self, request: CellRequest) -> bool {
        let stop = match (self.unclaimed.take(), &request.stamp) {
            (Some(i), Some(c)) => c.sent_before(&i),
            _ => false,
        };
        self.cell = Some(AskedCell { request, stop });
        stop
    }
}

impl RunningCell {
    /// The number the next run will have, for the `begin` its process is told first.
    pub(super) fn next_run(&self) -> u64 {
        self.slot().target.run + 1
    }

    /// Run `run` of the user's cell begins in process `pid` (`named`: its process was told the
    /// number); false, and nothing runs, if an interrupt already stopped the cell.
    pub(super) fn begin(&self, pid: i32, run: u64, named: bool) -> bool {
        let mut slot = self.slot();
        self.killed.store(false, Ordering::Release);
        self.compile_stopped.store(false, Ordering::Release);
        self.requested.store(false, Ordering::Release);
        slot.target = Target { pid: 0, run, named };
        if slot.cell.as_ref().is_some_and(|c| c.stop) {
            return false;
        }
        slot.target.pid = pid;
        true
    }

    /// The run has ended: no interrupt reaches its process any more.
    pub(super) fn end(&self) {
        self.slot().target.pid = 0;
    }

    fn slot(&self) -> MutexGuard<'_, Slot> {
        // The slot is plain values, whole after any panic.
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How long an interrupted cell may take to stop before its process is killed:
/// `PLACELAB_INTERRUPT_GRACE` seconds, 2 by default.
pub fn interrupt_grace() -> Duration {
    crate::settings::seconds("PLACELAB_INTERRUPT_GRACE", Duration::from_secs(2))
}

impl Interrupter {
    /// A cell is asked for (a kernel's, as its `execute_input` goes out; a terminal's, as it is
    /// entered): from now on an interrupt meant for it stops it, even before it begins. A
    /// client's interrupt that came first, though sent after this cell, stops it too.
    pub fn cell_asked(&self, request: CellRequest) {
        self.running.slot().ask(request);
    }

    /// The evaluator takes the job of the cell asked for as `request` (asked for now, if no
    /// shell said so before); whether an interrupt already stopped it.
    pub(super) fn job_begins(&self, request: &CellRequest) -> bool {
        let mut slot = self.running.slot();
        match &slot.cell {
            Some(c) if c.request == *request => c.stop,
            _ => slot.ask(request.clone()),
        }
    }

    /// The cell's job is done: an interrupt from now on finds no cell.
    pub(super) fn job_ends(&self) {
        self.running.slot().cell = None;
    }

    /// Stops the user's cell, if there is one and the interrupt can be meant for it.
    pub fn interrupt(&self, asker: &Asker) -> Stopped {
        let r = &self.running;
        // Held until the cell is signalled: the cell cannot end and the next begin meanwhile.
        let mut slot = r.slot();
        let target = slot.target;
        let Some(cell) = slot.cell.as_mut() else {
            if let Asker::Client(stamp) = asker {
                slot.unclaimed = Some(stamp.clone());
            }
            return Stopped::NoCell;
        };
        if !cell.request.can_be_stopped_by(asker) {
            return Stopped::NotMeantForIt;
        }
        if target.pid <= 0 {
            cell.stop = true;
            return Stopped::BeforeItRan;
        }
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
        // nothing left to stop them). An idle process only raises its flag, which the next run
        // lowers.
        signal_cell(target);
        drop(slot);
        self.kill_after_grace(target);
        Stopped::Running
    }

    /// A cell still running its grace period after the interrupt has its compile stopped again
    /// or, running, its process killed.
    fn kill_after_grace(&self, target: Target) {
        let running = self.running.clone();
        std::thread::spawn(move || {
            for round in 1.. {
                std::thread::sleep(interrupt_grace());
                let slot = running.slot();
                if slot.target != target {
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
                // SAFETY: signalling the cell's process while the same run still goes on (the
                // lock is held).
                unsafe { libc::kill(target.pid, libc::SIGKILL) };
                return;
            }
        });
    }
}

/// SIGINT to the running cell's process, always queued with a value: the run's number where its
/// process knows it (a signal handled late, once the next run began, is then ignored there), else
/// 0, "whatever runs". The cell's process ignores a SIGINT without one (a terminal's Ctrl-C,
/// which reaches it directly): which cell that was meant for is the interrupter's to decide.
fn signal_cell(target: Target) {
    let value = libc::sigval {
        sival_ptr: if target.named { target.run } else { 0 } as usize as *mut libc::c_void,
    };
    // SAFETY: signalling the cell's process, recorded when the run began; it still runs.
    unsafe { libc::sigqueue(target.pid, libc::SIGINT, value) };
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
mod tests;
