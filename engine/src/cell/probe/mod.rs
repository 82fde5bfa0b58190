//! The side channel a front end reads the engine through, without compiling anything: a thread
//! in the process that runs the cells answers one-line requests on a Unix socket with memory
//! stats, the transfer log, cache releases, and at a cell's end the checks its GPU kernels made.
//! The protocol is `wire.rs`, shared with the front end.

pub mod wire;

use std::io::{BufRead, BufReader, Write};
use std::sync::OnceLock;
use std::time::Duration;

use crate::device::error::{Error, Reported};
use crate::device::{Device, DeviceKind};
use crate::{memory, transfer};
use wire::{DeviceStats, IdleReleaseLine, PINNED, Reply, Request, Snapshot, TransferLine};

/// The environment variable that names the socket; set by the front end.
pub const ENV: &str = "PLACELAB_PROBE";

/// Starts the answering thread if `PLACELAB_PROBE` names a socket path (once per process), and
/// the pass-through that reports failed cells (`streams.rs`).
pub fn serve_from_env() {
    static STARTED: OnceLock<()> = OnceLock::new();
    let Ok(path) = std::env::var(ENV) else { return };
    crate::cell::streams::install();
    crate::device::interrupt::install_sigint_handler();
    STARTED.get_or_init(|| {
        // Its folder is its owner's alone already (the front end's cache); this socket too, from
        // the moment it has its name: bound under another, made private, then renamed.
        let staging = format!("{path}.staging");
        let _ = std::fs::remove_file(&staging);
        let Ok(listener) = std::os::unix::net::UnixListener::bind(&staging) else {
            return;
        };
        use std::os::unix::fs::PermissionsExt;
        let private = std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o600));
        if private
            .and_then(|()| std::fs::rename(&staging, &path))
            .is_err()
        {
            let _ = std::fs::remove_file(&staging);
            return;
        }
        std::thread::Builder::new()
            .name("placelab-probe".into())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    let mut line = String::new();
                    let mut reader = BufReader::new(&stream);
                    if reader.read_line(&mut line).is_err() {
                        continue;
                    }
                    let reply = answer(line.trim());
                    let _ = (&stream).write_all(reply.as_bytes());
                }
            })
            .ok();
    });
}

/// The reply to one request line.
pub fn answer(request: &str) -> String {
    let reply = match Request::parse(request) {
        Some(Request::Stats { after_seq }) => Reply::Snapshot(snapshot(after_seq)),
        Some(Request::Begin { cell }) => {
            crate::device::interrupt::begin(cell);
            Reply::Done
        }
        Some(Request::Sync { token }) => {
            crate::cell::streams::sync(token);
            Reply::Done
        }
        Some(Request::EmptyCache) => Reply::Released {
            bytes: memory::used_devices()
                .iter()
                .map(|d| memory::empty_cache(d).unwrap_or(0) as u64)
                .sum(),
        },
        Some(Request::Devices) => Reply::Devices(crate::cuda::devices(false)),
        Some(Request::CellEnd { wait_ms }) => cell_end(Duration::from_millis(wait_ms)),
        None => Reply::Error("unknown request".into()),
    };
    reply.encode()
}

/// The checks the cell's kernels made on each GPU, read now that the cell has ended (waiting up
/// to `wait` in all for the devices with checks to read, or until the user interrupts), so that
/// a bad index fails its own cell.
/// Its cost, measured on a 2-core VM with an emulated GPU (optimized test build): 0.3-0.6 µs
/// when no check is queued (a lock per opened GPU, no driver call), 35-70 µs with one whose
/// kernel is done (an event recorded and waited for; a real GPU's record and query take a few
/// µs), beside 50-65 µs for the request's round trip on the socket.
fn cell_end(wait: Duration) -> Reply {
    let end = crate::backend::gpu::runtime::read_checks_at_cell_end(wait);
    let (found, failed): (Vec<Error>, Vec<Error>) = end.errors.into_iter().partition(|e| {
        matches!(
            e,
            Error::FoundOnDevice {
                reported: Reported::AtCellEnd,
                ..
            }
        )
    });
    let texts = |errors: Vec<Error>| errors.iter().map(|e| e.to_string()).collect();
    Reply::CellEnd {
        found: texts(found),
        failed: texts(failed),
        still_running: end.still_running.iter().map(|d| d.to_string()).collect(),
        stopped: end.stopped.iter().map(|d| d.to_string()).collect(),
    }
}

/// Every used device's memory, and the transfers after `after_seq`.
fn snapshot(after_seq: u64) -> Snapshot {
    // Non-blocking copies that have finished since are timed and logged now.
    crate::transfer::inflight::poll();
    let mut devices: std::collections::BTreeMap<String, DeviceStats> = memory::used_devices()
        .into_iter()
        .filter_map(|d| {
            let stats = device_stats(d)?;
            Some((stats.name.clone(), stats))
        })
        .collect();
    if let Some(pinned) = pinned_stats() {
        devices.insert(pinned.name.clone(), pinned);
    }
    let transfers = transfer::log_since(after_seq)
        .into_iter()
        .map(|t| TransferLine {
            seq: t.seq,
            from: t.from,
            to: t.to,
            bytes: t.bytes as u64,
            nanos: t.duration.as_nanos() as u64,
            pinned: t.memory == transfer::HostMemoryKind::Pinned,
            clock: t.clock,
            predicted: t
                .predicted
                .map(|p| (p.gpu.key.to_string(), p.duration.as_nanos() as u64)),
        })
        .collect();
    let idle_releases = memory::idle::releases_since(0)
        .into_iter()
        .map(|r| IdleReleaseLine {
            seq: r.seq,
            device: r.device.to_string(),
            bytes: r.bytes,
            idle_ms: r.idle.as_millis() as u64,
        })
        .collect();
    Snapshot {
        devices,
        transfers,
        last_seq: transfer::last_seq(),
        idle_releases,
    }
}

/// Page-locked host memory as a line of its own (`pinned`), once any was locked: held by pinned
/// tensors, and locked in all (the cache's free blocks too).
fn pinned_stats() -> Option<DeviceStats> {
    let s = crate::backend::gpu::pinned::stats();
    (s.reserved_bytes > 0).then(|| DeviceStats {
        name: PINNED.into(),
        kind: DeviceKind::Cpu,
        allocated: s.allocated_bytes as u64,
        reserved: s.reserved_bytes as u64,
        peak: s.peak_allocated_bytes as u64,
        tensors: s.active,
        free: 0,
        total: 0,
    })
}

/// A used device's memory; `None` for a stand-in that no longer exists.
fn device_stats(d: Device) -> Option<DeviceStats> {
    let kind = d.kind().ok()?;
    let s = memory::stats(&d).unwrap_or_default();
    let (free, total) = memory::mem_get_info(&d).unwrap_or((0, 0));
    let tensors = memory::live_storages(&d)
        .map(|l| l.iter().filter(|s| s.is_tensor()).count())
        .unwrap_or(0);
    Some(DeviceStats {
        name: d.to_string(),
        kind,
        allocated: s.allocated_bytes as u64,
        reserved: s.reserved_bytes as u64,
        peak: s.peak_allocated_bytes as u64,
        tensors: tensors as u64,
        free: free as u64,
        total: total as u64,
    })
}
