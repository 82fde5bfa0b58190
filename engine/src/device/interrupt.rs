//! Stopping a running cell without losing the session. In the process that runs cells, SIGINT
//! only raises a flag; every allocation (so every op that makes a tensor) checks it and returns
//! `Error::Interrupted`, so a loop of tensor work that uses `?` ends within an op and its
//! temporaries are dropped, while the variables of earlier cells stay. The flag stays raised
//! for the rest of the cell and is lowered when the next cell begins.
//!
//! The front end's SIGINT names the cell it meant (`sigqueue`'s value): a signal is handled
//! whenever the process next runs, and the soak saw one meant for an interrupted cell arrive
//! after the next cell had begun, which then stopped at its first op. A signal that names an
//! earlier cell is ignored; one that names cell 0 is for whatever runs. A SIGINT that was not
//! queued (a terminal's Ctrl-C, had the process stayed in the terminal's foreground group, or a
//! `kill`) is ignored: only the front end knows which cell a Ctrl-C was meant for (a second
//! Ctrl-C for a cell that had stopped reached the next one here).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::device::error::{Error, Result};

static REQUESTED: AtomicBool = AtomicBool::new(false);
/// The number the front end gave the cell that began last (`begin`).
static CELL: AtomicU64 = AtomicU64::new(0);

/// Asks the running cell to stop (safe to call from a signal handler).
pub fn request() {
    REQUESTED.store(true, Ordering::Relaxed);
}

/// Forgets an interrupt (a new cell begins).
pub fn clear() {
    REQUESTED.store(false, Ordering::Relaxed);
}

/// Cell number `cell` begins: an interrupt that came while none ran, or one still on its way
/// for an earlier cell, is forgotten.
pub fn begin(cell: u64) {
    // The number first: a late signal for the last cell, handled between the two, is ignored.
    CELL.store(cell, Ordering::SeqCst);
    clear();
}

/// Whether a SIGINT that names `cell` (0: whatever runs) is meant for the cell that runs now.
fn meant_for_this_cell(cell: u64) -> bool {
    cell == 0 || cell == CELL.load(Ordering::SeqCst)
}

pub fn is_requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}

/// `Err(Interrupted)` once the user asked the cell to stop.
pub fn check() -> Result<()> {
    if is_requested() {
        Err(Error::Interrupted)
    } else {
        Ok(())
    }
}

extern "C" fn on_sigint(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes an SA_SIGINFO handler a valid siginfo; `si_value` is set when
    // `si_code` is SI_QUEUE.
    let cell = unsafe {
        (!info.is_null() && (*info).si_code == libc::SI_QUEUE)
            .then(|| (*info).si_value().sival_ptr as usize as u64)
    };
    if cell.is_some_and(meant_for_this_cell) {
        request();
    }
}

/// Makes a queued SIGINT raise the flag instead of ending the process, and any other SIGINT do
/// nothing (the cell process only, whose front end queues every interrupt it means).
pub fn install_sigint_handler() {
    // SAFETY: the handler only reads and stores atomics, which is async-signal-safe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigint as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
    }
}
