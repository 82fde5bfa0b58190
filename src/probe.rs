//! The side channel a front end reads the engine through, without compiling anything: a thread
//! in the process that runs the cells answers one-line requests on a Unix socket with memory
//! stats, the transfer log, and cache releases.
//!
//! Protocol (text, one request per connection): `stats AFTER_SEQ` → one `device …` line per used
//! device, one `transfer …` line per transfer with `seq > AFTER_SEQ`, then `end`;
//! `empty_cache` → `released BYTES`, `end`; `sync TOKEN` → `end`, after writing a sync line to
//! stderr (`cell_io::SYNC`); `begin` (a cell starts: an old interrupt is forgotten) → `end`. Values are `key=value`, separated by spaces.

use std::io::{BufRead, BufReader, Write};
use std::sync::OnceLock;

use crate::{Device, memory, transfer};

/// The environment variable that names the socket; set by the front end.
pub const ENV: &str = "PLACELAB_PROBE";

/// Starts the answering thread if `PLACELAB_PROBE` names a socket path (once per process), and
/// the pass-through that reports failed cells (`cell_io`).
pub fn serve_from_env() {
    static STARTED: OnceLock<()> = OnceLock::new();
    let Ok(path) = std::env::var(ENV) else { return };
    crate::cell_io::install();
    crate::interrupt::install_sigint_handler();
    STARTED.get_or_init(|| {
        let _ = std::fs::remove_file(&path);
        let Ok(listener) = std::os::unix::net::UnixListener::bind(&path) else {
            return;
        };
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

/// The reply to one request.
pub fn answer(request: &str) -> String {
    let mut words = request.split_whitespace();
    let mut out = String::new();
    match words.next() {
        Some("stats") => {
            let after: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
            // Non-blocking copies that have finished since are timed and logged now.
            crate::inflight::poll();
            for d in memory::used_devices() {
                out.push_str(&device_line(d));
            }
            for t in transfer::log_since(after) {
                out.push_str(&format!(
                    "transfer seq={} from={} to={} bytes={} ns={} pinned={} simulated={}\n",
                    t.seq,
                    t.from,
                    t.to,
                    t.bytes,
                    t.duration.as_nanos(),
                    (t.memory == transfer::HostMemoryKind::Pinned) as u8,
                    (t.clock == transfer::Clock::SimulatedHostCopy) as u8
                ));
            }
            out.push_str(&format!("seq last={}\n", transfer::last_seq()));
        }
        Some("begin") => crate::interrupt::clear(),
        Some("sync") => {
            let token: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
            crate::cell_io::sync(token);
        }
        Some("empty_cache") => {
            let released: usize = memory::used_devices()
                .iter()
                .map(|d| memory::empty_cache(d).unwrap_or(0))
                .sum();
            out.push_str(&format!("released bytes={released}\n"));
        }
        _ => out.push_str("error unknown request\n"),
    }
    out.push_str("end\n");
    out
}

fn device_line(d: Device) -> String {
    let s = memory::stats(&d).unwrap_or_default();
    let (free, total) = memory::mem_get_info(&d).unwrap_or((0, 0));
    let tensors = memory::live_storages(&d)
        .map(|l| l.iter().filter(|s| s.is_tensor()).count())
        .unwrap_or(0);
    format!(
        "device name={d} simulated={} allocated={} reserved={} peak={} tensors={tensors} free={free} total={total}\n",
        d.is_simulated() as u8,
        s.allocated_bytes,
        s.reserved_bytes,
        s.peak_allocated_bytes
    )
}
