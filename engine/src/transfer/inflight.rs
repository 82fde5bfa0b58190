//! Copies still running after a non-blocking `.to()` returned.
//!
//! Each one is an `InFlight` held by the new tensor, by both storages it touches, and by a
//! process-wide list until it completes. A storage waits for its copies before the host reads or
//! writes its bytes and before its memory is freed, so no value is ever read half-copied (where
//! PyTorch would hand back whatever the buffer held). Completing a copy reads its time and writes
//! it to the transfer log; `cuda::synchronize(i)` is the explicit point where that happens for
//! every copy touching `cuda:i`, and the session polls at the end of each cell.

use std::sync::{Arc, Mutex, OnceLock};

use super::Transfer;
use crate::device::Device;
use crate::device::error::{Error, Result};
use crate::storage::{Completion, PendingCopy, Storage};

/// One copy that may still be running.
pub(crate) struct InFlight {
    /// The transfer as known when `.to()` returned; completion fills in `duration` and `seq`.
    queued: Transfer,
    /// `None` once completed. Held locked while waiting, so a second waiter waits for the first.
    completion: Mutex<Option<Completion>>,
    /// A temporary the copy reads (a contiguous copy of a strided source), freed on completion.
    keep_alive: Mutex<Option<Arc<Storage>>>,
    done: OnceLock<std::result::Result<Transfer, Error>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn in_flight() -> &'static Mutex<Vec<Arc<InFlight>>> {
    static LIST: OnceLock<Mutex<Vec<Arc<InFlight>>>> = OnceLock::new();
    LIST.get_or_init(Default::default)
}

impl InFlight {
    /// Starts tracking a queued copy (and lists it until it completes).
    pub(crate) fn track(
        queued: Transfer,
        completion: Completion,
        keep_alive: Option<Arc<Storage>>,
    ) -> Arc<InFlight> {
        let f = Arc::new(InFlight {
            queued,
            completion: Mutex::new(Some(completion)),
            keep_alive: Mutex::new(keep_alive),
            done: OnceLock::new(),
        });
        lock(in_flight()).push(f.clone());
        f
    }

    /// The transfer as it was queued (its duration is not known yet).
    pub(crate) fn queued(&self) -> &Transfer {
        &self.queued
    }

    fn touches(&self, d: Device) -> bool {
        self.queued.from == d || self.queued.to == d
    }

    fn is_done(&self) -> bool {
        self.done.get().is_some()
    }

    /// Whether the copy has completed, completing it if it has just finished. Never waits.
    pub(crate) fn check(&self) -> bool {
        self.finish(false)
    }

    /// Waits for the copy (at once if it has finished) and returns the completed transfer.
    pub(crate) fn wait(&self) -> std::result::Result<&Transfer, &Error> {
        self.finish(true);
        self.done
            .get()
            .expect("a waited copy has completed")
            .as_ref()
    }

    /// Completes the copy if it has finished, or always when `block`; whether it is complete.
    fn finish(&self, block: bool) -> bool {
        let mut completion = if block {
            lock(&self.completion)
        } else {
            match self.completion.try_lock() {
                Ok(c) => c,
                // Someone is waiting for it now.
                Err(_) => return false,
            }
        };
        if let Some(c) = completion.take_if(|c| block || c.is_done()) {
            let done = c.wait().map(|duration| {
                super::record(Transfer {
                    duration,
                    ..self.queued.clone()
                })
            });
            let _ = self.done.set(done);
        }
        drop(completion);
        if !self.is_done() {
            return false;
        }
        // Outside both locks: dropping a storage waits for its copies, this one among them.
        let kept = lock(&self.keep_alive).take();
        drop(kept);
        true
    }
}

impl PendingCopy for InFlight {
    fn wait_done(&self) {
        let _ = self.wait();
    }

    fn is_done(&self) -> bool {
        self.check()
    }
}

/// Completes the copies that have finished, without waiting for the others.
pub(crate) fn poll() {
    let list: Vec<Arc<InFlight>> = lock(in_flight()).clone();
    let finished: Vec<_> = list.into_iter().filter(|f| f.finish(false)).collect();
    lock(in_flight()).retain(|f| !finished.iter().any(|d| Arc::ptr_eq(d, f)));
}

/// Waits for every copy from or to `device`. The first error, if any, is returned after all of
/// them have been waited for.
pub(crate) fn wait_device(device: Device) -> Result<()> {
    let list: Vec<Arc<InFlight>> = lock(in_flight())
        .iter()
        .filter(|f| f.touches(device))
        .cloned()
        .collect();
    let mut first_error = None;
    for f in &list {
        if let Err(e) = f.wait() {
            first_error.get_or_insert_with(|| e.clone());
        }
    }
    lock(in_flight()).retain(|f| !f.is_done());
    first_error.map_or(Ok(()), Err)
}

/// How many copies have not completed yet.
pub fn pending() -> usize {
    poll();
    lock(in_flight()).len()
}
