//! Fork-join for a kernel called from outside rayon's pool (a user's thread, a REPL cell): the
//! calling thread runs the first part itself while the pool's threads run the others. Rayon's
//! own `join` and parallel iterators, called from outside the pool, hand all the work to the
//! pool and put the caller to sleep until it is done: one more thread than cores, and a
//! sleep/wake round trip per op — on two cores, a small op's whole budget.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Thread;
use std::time::{Duration, Instant};

use rayon::prelude::*;

/// How long the caller spins for the other parts before it sleeps: a few parts' worth of a small
/// op, so a balanced split never sleeps.
const SPIN: Duration = Duration::from_micros(50);

struct Pending {
    /// Parts not finished yet.
    left: AtomicUsize,
    /// The first panic of a part run on the pool, rethrown on the caller.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    waiter: Thread,
}

/// Runs `f(0)`, …, `f(parts - 1)` in parallel and returns when all have: part 0 on the calling
/// thread, the others on rayon's pool. A panic in any part is rethrown here, after every part
/// has finished. Inside the pool it is an ordinary parallel loop.
pub fn split(parts: usize, f: &(dyn Fn(usize) + Sync)) {
    if parts <= 1 {
        if parts == 1 {
            f(0);
        }
        return;
    }
    if rayon::current_thread_index().is_some() {
        (0..parts).into_par_iter().for_each(f);
        return;
    }
    let pending = Arc::new(Pending {
        left: AtomicUsize::new(parts - 1),
        panic: Mutex::new(None),
        waiter: std::thread::current(),
    });
    // SAFETY: every part sent to the pool finishes (`left` reaches 0) before this function
    // returns or unwinds — the wait below runs in both cases, since part 0's panic is caught —
    // so `f` outlives every use of this reference.
    let shared: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
    for part in 1..parts {
        let pending = pending.clone();
        rayon::spawn(move || {
            if let Err(e) = catch_unwind(AssertUnwindSafe(|| shared(part))) {
                let mut first = pending.panic.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert(e);
            }
            if pending.left.fetch_sub(1, Ordering::AcqRel) == 1 {
                pending.waiter.unpark();
            }
        });
    }
    let mine = catch_unwind(AssertUnwindSafe(|| f(0)));
    let start = Instant::now();
    while pending.left.load(Ordering::Acquire) != 0 {
        if start.elapsed() < SPIN {
            std::hint::spin_loop();
        } else {
            // A wake-up that comes early or is left over from an earlier split only loops.
            std::thread::park_timeout(Duration::from_millis(1));
        }
    }
    if let Some(e) = pending
        .panic
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    {
        resume_unwind(e);
    }
    if let Err(e) = mine {
        resume_unwind(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_runs_once_and_the_caller_runs_the_first() {
        let caller = std::thread::current().id();
        let hits: Vec<AtomicUsize> = (0..5).map(|_| AtomicUsize::new(0)).collect();
        let first_here = AtomicUsize::new(0);
        split(5, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
            if i == 0 && std::thread::current().id() == caller {
                first_here.store(1, Ordering::Relaxed);
            }
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        assert_eq!(first_here.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_panic_in_a_part_reaches_the_caller_after_all_parts_end() {
        let done = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            split(4, &|i| {
                if i == 2 {
                    panic!("part 2 failed");
                }
                std::thread::sleep(Duration::from_millis(5));
                done.fetch_add(1, Ordering::Relaxed);
            })
        }));
        assert!(r.is_err());
        assert_eq!(done.load(Ordering::Relaxed), 3);
    }
}
