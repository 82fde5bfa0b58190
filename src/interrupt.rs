//! Stopping a running cell without losing the session. In the process that runs cells, SIGINT
//! only raises a flag; every allocation (so every op that makes a tensor) checks it and returns
//! `Error::Interrupted`, so a loop of tensor work that uses `?` ends within an op and its
//! temporaries are dropped, while the variables of earlier cells stay. The flag stays raised
//! for the rest of the cell and is lowered when the next cell begins.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Asks the running cell to stop (safe to call from a signal handler).
pub fn request() {
    REQUESTED.store(true, Ordering::Relaxed);
}

/// Forgets an interrupt (a new cell begins).
pub fn clear() {
    REQUESTED.store(false, Ordering::Relaxed);
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

extern "C" fn on_sigint(_: libc::c_int) {
    request();
}

/// Makes SIGINT raise the flag instead of ending the process (the cell process only).
pub fn install_sigint_handler() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigint as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
    }
}
