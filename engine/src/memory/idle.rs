//! Giving an idle process's GPU caches back: when no block has been handed out or taken back
//! for a set time, a watch thread calls the release it was given (`memory::set_idle_release`
//! gives `empty_cache` on each CUDA device), so that learners sharing one GPU get back what an
//! idle kernel's cache holds. Off unless `PLACELAB_IDLE_EMPTY_CACHE=SECONDS` (a class's
//! kernelspec) or `memory::set_idle_release` turns it on. Each release is numbered and kept,
//! for the next cell's strip to say (`releases_since`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

use crate::device::Device;
use crate::device::error::{Error, Result};

/// The variable that turns idle release on: seconds without an allocation or a free.
pub const IDLE_EMPTY_CACHE_VAR: &str = "PLACELAB_IDLE_EMPTY_CACHE";

/// How many releases are kept for the strip (older ones were shown long ago).
const KEPT: usize = 16;

/// One release: the device, the bytes it gave back, and how long the process had been idle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IdleRelease {
    /// Numbered from 1 in this process.
    pub seq: u64,
    pub device: Device,
    pub bytes: u64,
    pub idle: Duration,
}

static LAST_USE_MS: AtomicU64 = AtomicU64::new(0);
/// The idle time that releases, in ms; 0: off.
static AFTER_MS: AtomicU64 = AtomicU64::new(0);
static RELEASES: Mutex<(u64, Vec<IdleRelease>)> = Mutex::new((0, Vec::new()));

fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// A block was handed out or taken back: the process is not idle. (One atomic load while idle
/// release is off.)
pub(crate) fn touch() {
    if AFTER_MS.load(Ordering::Relaxed) != 0 {
        LAST_USE_MS.store(now_ms(), Ordering::Relaxed);
    }
}

/// What gives the caches back: each device that released something, and how many bytes.
pub(crate) type Release = fn() -> Vec<(Device, u64)>;

/// Calls `release` once the process has been idle for `after` (`None`: never). The watch runs
/// on a thread of its own, started at the first call that turns it on.
pub(crate) fn set(after: Option<Duration>, release: Release) {
    let ms = after.map_or(0, |d| d.as_millis().max(1) as u64);
    AFTER_MS.store(ms, Ordering::Relaxed);
    if ms > 0 {
        touch();
        static WATCH: Once = Once::new();
        WATCH.call_once(|| {
            let _ = std::thread::Builder::new()
                .name("placelab-idle-release".into())
                .spawn(move || watch(release));
        });
    }
}

/// `PLACELAB_IDLE_EMPTY_CACHE`, read when the first GPU's memory is set up.
pub(crate) fn from_env(release: Release) -> Result<()> {
    let Ok(text) = std::env::var(IDLE_EMPTY_CACHE_VAR) else {
        return Ok(());
    };
    set(Some(idle_time(&text)?), release);
    Ok(())
}

/// The idle time a setting gives: a positive, finite number of seconds.
fn idle_time(text: &str) -> Result<Duration> {
    let seconds = (text.trim().parse::<f64>().ok()).filter(|s| s.is_finite() && *s > 0.0);
    seconds.map(Duration::from_secs_f64).ok_or_else(|| Error::InvalidArgument {
        op: "idle release",
        msg: format!(
            "{IDLE_EMPTY_CACHE_VAR}={text:?} is no number of seconds: give how long a kernel may sit idle before its GPU caches are given back, such as 600"
        ),
    })
}

fn watch(release: Release) {
    loop {
        let after = AFTER_MS.load(Ordering::Relaxed);
        let check = Duration::from_millis((after / 4).clamp(50, 5_000));
        if after > 0 {
            let idle = now_ms().saturating_sub(LAST_USE_MS.load(Ordering::Relaxed));
            if idle >= after {
                record(release(), Duration::from_millis(idle));
                touch(); // the next release waits a whole idle time again
            }
        }
        std::thread::sleep(check);
    }
}

/// Keeps a numbered record of each device's release.
fn record(released: Vec<(Device, u64)>, idle: Duration) {
    let mut r = RELEASES.lock().unwrap_or_else(|e| e.into_inner());
    for (device, bytes) in released {
        r.0 += 1;
        let seq = r.0;
        r.1.push(IdleRelease {
            seq,
            device,
            bytes,
            idle,
        });
        if r.1.len() > KEPT {
            r.1.remove(0);
        }
    }
}

/// The releases numbered after `seq`, oldest first.
pub fn releases_since(seq: u64) -> Vec<IdleRelease> {
    let r = RELEASES.lock().unwrap_or_else(|e| e.into_inner());
    r.1.iter().filter(|x| x.seq > seq).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_is_a_positive_finite_number_of_seconds() {
        assert_eq!(idle_time(" 600 ").unwrap(), Duration::from_secs(600));
        assert_eq!(idle_time("0.5").unwrap(), Duration::from_millis(500));
        for bad in ["", "ten", "0", "-5", "inf", "1e400", "NaN"] {
            let e = idle_time(bad).unwrap_err().to_string();
            assert!(e.contains("is no number of seconds"), "{bad}: {e}");
        }
    }
}
