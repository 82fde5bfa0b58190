//! The probe's wire protocol, in one place: the cell process writes it (`probe::answer`) and the
//! front end reads it (`frontend/probe_client.rs`) with these same types.
//!
//! Text, one request per connection: `stats AFTER_SEQ`, `empty_cache`, `sync TOKEN`, `begin CELL`,
//! `cell_end WAIT_MS` or `devices`.
//! A reply is lines of `kind key=value …` ending with `end`: for `stats`, one `device` line per
//! used device, one `transfer` line per transfer with `seq > AFTER_SEQ`, and `seq last=N`; for
//! `empty_cache`, `released bytes=N`; for `devices`, one `listed TEXT` line per device, then
//! `versions TEXT`, `missing TEXT` and `no_real_gpu TEXT` where there is one, `real count=N` and `emulated count=N`;
//! for `cell_end`, one `found TEXT` line per check of the cell's that failed and one `failed TEXT`
//! per other error (their line breaks and backslashes escaped, `\n` and `\\`), and one
//! `still_running DEVICE` line per device still running the cell's checked work (ask again) and
//! one `stopped DEVICE` line per device whose wait the user interrupted.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::cuda::DeviceList;
use crate::device::DeviceKind;
use crate::transfer::Clock;

/// What the front end asks the cell process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Memory of every used device, and the transfers after `after_seq`.
    Stats { after_seq: u64 },
    /// Release every device's unused cached memory.
    EmptyCache,
    /// Write a sync marker with `token` to stderr, so the front end knows the cell's output up
    /// to here has been read.
    Sync { token: u64 },
    /// Cell number `cell` starts: an interrupt that came while none ran is forgotten, and a
    /// SIGINT that names an earlier cell from now on is ignored.
    Begin { cell: u64 },
    /// The devices the cell process can use (after any `simulate`), for `:devices`.
    Devices,
    /// The cell has ended: read the checks its kernels made on each GPU, waiting up to
    /// `wait_ms` in all for the devices that have some to read, or until the user interrupts
    /// (`Reply::CellEnd`).
    CellEnd { wait_ms: u64 },
}

impl Request {
    /// The request's line, without its newline.
    pub fn encode(&self) -> String {
        match self {
            Request::Stats { after_seq } => format!("stats {after_seq}"),
            Request::EmptyCache => "empty_cache".into(),
            Request::Sync { token } => format!("sync {token}"),
            Request::Begin { cell } => format!("begin {cell}"),
            Request::Devices => "devices".into(),
            Request::CellEnd { wait_ms } => format!("cell_end {wait_ms}"),
        }
    }

    /// Reads a request line; `None` for one this protocol does not have.
    pub fn parse(line: &str) -> Option<Request> {
        let mut words = line.split_whitespace();
        let number = |w: Option<&str>| w.and_then(|w| w.parse().ok()).unwrap_or(0);
        match words.next()? {
            "stats" => Some(Request::Stats {
                after_seq: number(words.next()),
            }),
            "empty_cache" => Some(Request::EmptyCache),
            "sync" => Some(Request::Sync {
                token: number(words.next()),
            }),
            "begin" => Some(Request::Begin {
                cell: number(words.next()),
            }),
            "devices" => Some(Request::Devices),
            "cell_end" => Some(Request::CellEnd {
                wait_ms: number(words.next()),
            }),
            _ => None,
        }
    }
}

/// The name of the line for page-locked host memory among the devices' (`DeviceStats`).
pub const PINNED: &str = "pinned";

/// One device's memory, as a `device` line carries it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceStats {
    pub name: String,
    /// What backs it (page-locked host memory's line: `Cpu`).
    pub kind: DeviceKind,
    pub allocated: u64,
    pub reserved: u64,
    pub peak: u64,
    pub tensors: u64,
    pub free: u64,
    pub total: u64,
}

/// One transfer, as a `transfer` line carries it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TransferLine {
    pub seq: u64,
    pub from: String,
    pub to: String,
    pub bytes: u64,
    pub nanos: u64,
    pub pinned: bool,
    /// How its time was measured (a simulated or emulated GPU's is a host copy's).
    pub clock: Clock,
    /// On a device standing for a named GPU: that GPU's key (`h100`) and the copy's predicted
    /// time there, in nanoseconds.
    pub predicted: Option<(String, u64)>,
}

/// The reply to `stats`: devices by name, and the transfers asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub devices: BTreeMap<String, DeviceStats>,
    pub transfers: Vec<TransferLine>,
    pub last_seq: u64,
    /// The latest idle releases of the GPUs' caches (`memory::idle`), as a `released` line
    /// carries each.
    pub idle_releases: Vec<IdleReleaseLine>,
}

/// One idle release: its number, the device, the bytes given back and the idle time before.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IdleReleaseLine {
    pub seq: u64,
    pub device: String,
    pub bytes: u64,
    pub idle_ms: u64,
}

/// A whole reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Snapshot(Snapshot),
    Released {
        bytes: u64,
    },
    /// `begin` and `sync`: nothing but `end`.
    Done,
    Devices(DeviceList),
    /// What the end of a cell found: the texts of the checks of the cell's own ops that failed
    /// (`found`), of other errors (an earlier cell's check, work that failed), the devices
    /// still running the cell's checked work when the wait's limit passed (to be asked again),
    /// and those whose wait the user interrupted (their checks are read at the next wait).
    CellEnd {
        found: Vec<String>,
        failed: Vec<String>,
        still_running: Vec<String>,
        stopped: Vec<String>,
    },
    Error(String),
}

impl Reply {
    /// The reply's lines, `end` last.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        match self {
            Reply::Snapshot(s) => encode_snapshot(&mut out, s),
            Reply::Released { bytes } => {
                let _ = writeln!(out, "released bytes={bytes}");
            }
            Reply::Done => {}
            Reply::Devices(d) => {
                // Each text on one line: a line break in a driver's message would end it early.
                let one_line = |t: &str| t.replace(['\r', '\n'], " ");
                for line in &d.devices {
                    let _ = writeln!(out, "listed {}", one_line(line));
                }
                let texts = [("versions", &d.versions), ("missing", &d.missing)];
                for (key, text) in texts.into_iter().chain([("no_real_gpu", &d.no_real_gpu)]) {
                    if let Some(t) = text {
                        let _ = writeln!(out, "{key} {}", one_line(t));
                    }
                }
                let _ = writeln!(out, "real count={}", d.real);
                let _ = writeln!(out, "emulated count={}", d.emulated);
            }
            Reply::CellEnd {
                found,
                failed,
                still_running,
                stopped,
            } => {
                let escaped = |texts: &[String]| texts.iter().map(|t| escape(t)).collect();
                let lines: [(&str, Vec<String>); 4] = [
                    ("found", escaped(found)),
                    ("failed", escaped(failed)),
                    ("still_running", still_running.clone()),
                    ("stopped", stopped.clone()),
                ];
                for (key, texts) in lines {
                    for t in texts {
                        let _ = writeln!(out, "{key} {t}");
                    }
                }
            }
            Reply::Error(why) => {
                let _ = writeln!(out, "error {why}");
            }
        }
        out.push_str("end\n");
        out
    }

    /// Reads a whole reply to `request`; `None` when it is cut short (no `end`).
    pub fn parse(request: Request, text: &str) -> Option<Reply> {
        if !text.ends_with("end\n") {
            return None;
        }
        if let Some(why) = text.lines().find_map(|l| l.strip_prefix("error ")) {
            return Some(Reply::Error(why.to_string()));
        }
        Some(match request {
            Request::Stats { .. } => Reply::Snapshot(parse_snapshot(text)),
            Request::EmptyCache => {
                let f = text
                    .lines()
                    .find(|l| l.starts_with("released "))
                    .map(fields);
                Reply::Released {
                    bytes: f.map_or(0, |f| number(&f, "bytes")),
                }
            }
            Request::Sync { .. } | Request::Begin { .. } => Reply::Done,
            Request::Devices => Reply::Devices(parse_devices(text)),
            Request::CellEnd { .. } => parse_cell_end(text),
        })
    }
}

/// A `stats` reply's lines: one per used device, one per transfer, then the last seq.
fn encode_snapshot(out: &mut String, s: &Snapshot) {
    for d in s.devices.values() {
        let _ = writeln!(
            out,
            "device name={} kind={} allocated={} reserved={} peak={} tensors={} free={} total={}",
            d.name,
            kind_text(d.kind),
            d.allocated,
            d.reserved,
            d.peak,
            d.tensors,
            d.free,
            d.total
        );
    }
    for t in &s.transfers {
        let _ = writeln!(
            out,
            "transfer seq={} from={} to={} bytes={} ns={} pinned={} clock={:?}{}",
            t.seq,
            t.from,
            t.to,
            t.bytes,
            t.nanos,
            t.pinned as u8,
            t.clock,
            match &t.predicted {
                Some((gpu, ns)) => format!(" predicted_on={gpu} predicted_ns={ns}"),
                None => String::new(),
            }
        );
    }
    for r in &s.idle_releases {
        let _ = writeln!(
            out,
            "released seq={} device={} bytes={} idle_ms={}",
            r.seq, r.device, r.bytes, r.idle_ms
        );
    }
    let _ = writeln!(out, "seq last={}", s.last_seq);
}

/// `text` on one line: backslashes and line breaks escaped (`unescape` reads it back).
fn escape(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
}

fn unescape(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

fn parse_cell_end(reply: &str) -> Reply {
    let (mut found, mut failed) = (Vec::new(), Vec::new());
    let (mut still_running, mut stopped) = (Vec::new(), Vec::new());
    for line in reply.lines() {
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        match key {
            "found" => found.push(unescape(rest)),
            "failed" => failed.push(unescape(rest)),
            "still_running" => still_running.push(rest.to_string()),
            "stopped" => stopped.push(rest.to_string()),
            _ => {}
        }
    }
    Reply::CellEnd {
        found,
        failed,
        still_running,
        stopped,
    }
}

fn parse_devices(reply: &str) -> DeviceList {
    let mut d = DeviceList::default();
    for line in reply.lines() {
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        let rest = rest.to_string();
        match key {
            "listed" => d.devices.push(rest),
            "versions" => d.versions = Some(rest),
            "missing" => d.missing = Some(rest),
            "no_real_gpu" => d.no_real_gpu = Some(rest),
            "real" => d.real = number(&fields(line), "count") as usize,
            "emulated" => d.emulated = number(&fields(line), "count") as usize,
            _ => {}
        }
    }
    d
}

fn fields(line: &str) -> BTreeMap<&str, &str> {
    line.split_whitespace()
        .skip(1)
        .filter_map(|kv| kv.split_once('='))
        .collect()
}

fn number(f: &BTreeMap<&str, &str>, k: &str) -> u64 {
    f.get(k).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn text(f: &BTreeMap<&str, &str>, k: &str) -> String {
    f.get(k).unwrap_or(&"?").to_string()
}

/// `cpu`, `gpu`, `emulated:CAPACITY` or `simulated:CAPACITY:GPU` (`-` for no named GPU).
fn kind_text(kind: DeviceKind) -> String {
    match kind {
        DeviceKind::Cpu => "cpu".into(),
        DeviceKind::Gpu => "gpu".into(),
        DeviceKind::EmulatedGpu { capacity } => format!("emulated:{capacity}"),
        DeviceKind::SimulatedGpu {
            capacity,
            stands_for,
        } => format!("simulated:{capacity}:{}", stands_for.map_or("-", |g| g.key)),
    }
}

/// The kind `kind_text` wrote, or `None` for text it never writes.
fn kind_of(text: &str) -> Option<DeviceKind> {
    let parts: Vec<&str> = text.split(':').collect();
    Some(match parts[..] {
        ["cpu"] => DeviceKind::Cpu,
        ["gpu"] => DeviceKind::Gpu,
        ["emulated", capacity] => DeviceKind::EmulatedGpu {
            capacity: capacity.parse().ok()?,
        },
        ["simulated", capacity, gpu] => DeviceKind::SimulatedGpu {
            capacity: capacity.parse().ok()?,
            stands_for: match gpu {
                "-" => None,
                key => Some(crate::cost::find(key)?),
            },
        },
        _ => return None,
    })
}

/// The clock `{:?}` wrote, or `None` for text it never writes.
fn clock_of(text: &str) -> Option<Clock> {
    Some(match text {
        "CudaEvents" => Clock::CudaEvents,
        "Host" => Clock::Host,
        "SimulatedHostCopy" => Clock::SimulatedHostCopy,
        "EmulatedEvents" => Clock::EmulatedEvents,
        _ => return None,
    })
}

fn parse_snapshot(reply: &str) -> Snapshot {
    let mut snap = Snapshot::default();
    for line in reply.lines() {
        let f = fields(line);
        match line.split_whitespace().next() {
            // A line whose kind or clock does not read is left out, never shown as another's.
            Some("device") => {
                let Some(kind) = kind_of(&text(&f, "kind")) else {
                    continue;
                };
                let d = DeviceStats {
                    name: text(&f, "name"),
                    kind,
                    allocated: number(&f, "allocated"),
                    reserved: number(&f, "reserved"),
                    peak: number(&f, "peak"),
                    tensors: number(&f, "tensors"),
                    free: number(&f, "free"),
                    total: number(&f, "total"),
                };
                snap.devices.insert(d.name.clone(), d);
            }
            Some("transfer") => {
                let Some(clock) = clock_of(&text(&f, "clock")) else {
                    continue;
                };
                snap.transfers.push(TransferLine {
                    seq: number(&f, "seq"),
                    from: text(&f, "from"),
                    to: text(&f, "to"),
                    bytes: number(&f, "bytes"),
                    nanos: number(&f, "ns"),
                    pinned: number(&f, "pinned") == 1,
                    clock,
                    predicted: f
                        .get("predicted_on")
                        .map(|gpu| (gpu.to_string(), number(&f, "predicted_ns"))),
                })
            }
            Some("released") => snap.idle_releases.push(IdleReleaseLine {
                seq: number(&f, "seq"),
                device: text(&f, "device"),
                bytes: number(&f, "bytes"),
                idle_ms: number(&f, "idle_ms"),
            }),
            Some("seq") => snap.last_seq = number(&f, "last"),
            _ => {}
        }
    }
    snap
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot of one emulated device and two transfers, one with a prediction.
    fn two_transfers() -> Snapshot {
        let mut snap = Snapshot {
            last_seq: 9,
            idle_releases: vec![IdleReleaseLine {
                seq: 2,
                device: "cuda:0".into(),
                bytes: 20 << 20,
                idle_ms: 600_000,
            }],
            ..Snapshot::default()
        };
        let d = DeviceStats {
            name: "cuda:0".into(),
            kind: DeviceKind::EmulatedGpu { capacity: 2 },
            allocated: 4_000_768,
            reserved: 20 << 20,
            peak: 5,
            tensors: 1,
            free: 1,
            total: 2,
        };
        snap.devices.insert(d.name.clone(), d);
        snap.transfers.push(TransferLine {
            seq: 9,
            from: "cpu".into(),
            to: "cuda:0".into(),
            bytes: 4_000_000,
            nanos: 1_000_000,
            pinned: false,
            clock: Clock::SimulatedHostCopy,
            predicted: None,
        });
        snap.transfers.push(TransferLine {
            seq: 10,
            from: "cuda:0".into(),
            to: "cuda:1".into(),
            bytes: 4_000_000,
            nanos: 1_000_000,
            pinned: false,
            clock: Clock::SimulatedHostCopy,
            predicted: Some(("h100".into(), 20_000)),
        });
        snap
    }

    #[test]
    fn every_request_and_reply_reads_back_as_written() {
        for r in [
            Request::Stats { after_seq: 7 },
            Request::EmptyCache,
            Request::Sync { token: 3 },
            Request::Begin { cell: 12 },
            Request::Devices,
            Request::CellEnd { wait_ms: 1000 },
        ] {
            assert_eq!(Request::parse(&r.encode()), Some(r));
        }
        let stats = Request::Stats { after_seq: 8 };
        let reply = Reply::Snapshot(two_transfers());
        assert_eq!(Reply::parse(stats, &reply.encode()), Some(reply));
        let released = Reply::Released { bytes: 1 << 21 };
        assert_eq!(
            Reply::parse(Request::EmptyCache, &released.encode()),
            Some(released)
        );
        assert_eq!(
            Reply::parse(Request::Begin { cell: 12 }, "end\n"),
            Some(Reply::Done)
        );
        let devices = Reply::Devices(DeviceList {
            devices: vec![
                "cpu (2 threads)".into(),
                "cuda:0 (simulated) 8.00 GiB".into(),
            ],
            versions: None,
            missing: None,
            real: 0,
            emulated: 2,
            no_real_gpu: Some("libcuda.so: not found".into()),
        });
        assert_eq!(
            Reply::parse(Request::Devices, &devices.encode()),
            Some(devices)
        );
        // A reason with a line break (a driver's message) stays one line, and is not read as
        // the protocol's `error`.
        let broken = Reply::Devices(DeviceList {
            no_real_gpu: Some("libcuda.so:\nerror loading".into()),
            ..DeviceList::default()
        });
        let Some(Reply::Devices(read)) = Reply::parse(Request::Devices, &broken.encode()) else {
            panic!("the devices reply reads back");
        };
        assert_eq!(
            read.no_real_gpu.as_deref(),
            Some("libcuda.so: error loading")
        );
        assert_eq!(Reply::parse(stats, "device name=cpu"), None, "cut short");
    }

    /// An error found at a cell's end keeps its line breaks and backslashes, on one line of the
    /// reply; nothing found reads back as nothing.
    #[test]
    fn a_cell_ends_reply_reads_back_as_written() {
        let found = Reply::CellEnd {
            found: vec!["index 9 out of range\ncuda:0 checked \\n this\r".into()],
            failed: vec!["error in\nsynchronize".into()],
            still_running: vec!["cuda:1".into()],
            stopped: vec!["cuda:2".into()],
        };
        let encoded = found.encode();
        assert_eq!(encoded.lines().count(), 5, "{encoded}");
        assert_eq!(
            Reply::parse(Request::CellEnd { wait_ms: 0 }, &encoded),
            Some(found)
        );
        assert_eq!(
            Reply::parse(Request::CellEnd { wait_ms: 0 }, "end\n"),
            Some(Reply::CellEnd {
                found: vec![],
                failed: vec![],
                still_running: vec![],
                stopped: vec![]
            })
        );
    }

    /// Each device kind and each clock reads back as written, a named GPU's too; a kind the
    /// cell process never writes leaves its line out rather than showing it as another kind's.
    #[test]
    fn every_device_kind_and_clock_reads_back_as_written() {
        let simulated = |capacity, gpu| DeviceKind::SimulatedGpu {
            capacity,
            stands_for: crate::cost::find(gpu),
        };
        let kinds = [
            DeviceKind::Cpu,
            DeviceKind::Gpu,
            DeviceKind::EmulatedGpu { capacity: 2 },
            simulated(3, "h100"),
            simulated(4, "no such GPU"),
        ];
        for kind in kinds {
            assert_eq!(kind_of(&kind_text(kind)), Some(kind), "{kind:?}");
        }
        for clock in [
            Clock::CudaEvents,
            Clock::Host,
            Clock::SimulatedHostCopy,
            Clock::EmulatedEvents,
        ] {
            assert_eq!(clock_of(&format!("{clock:?}")), Some(clock));
        }
        let stats = Request::Stats { after_seq: 0 };
        let line = "device name=cuda:0 kind=quantum allocated=1\nseq last=0\nend\n";
        let Some(Reply::Snapshot(read)) = Reply::parse(stats, line) else {
            panic!("the snapshot reads back");
        };
        assert!(read.devices.is_empty(), "{read:?}");
    }
}
