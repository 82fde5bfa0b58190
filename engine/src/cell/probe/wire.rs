//! The probe's wire protocol, in one place: the cell process writes it (`probe::answer`) and the
//! front end reads it (`frontend/probe_client.rs`) with these same types. Both directions are
//! derived from the types (serde): one request per connection, one line of JSON, and one line of
//! JSON back. A new field is a field here and nothing else; a device's kind crosses as a
//! `DeviceKind`, a transfer's ends as `Device`s.
//!
//! The requests: `Stats` (every used device's memory, the transfers after a number, the idle
//! releases), `EmptyCache`, `Sync` (a marker on stderr), `Begin` (a cell's number), `Devices`
//! (for `:devices`) and `CellEnd` (the checks the cell's kernels made, read as it ends).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cuda::DeviceList;
use crate::device::{Device, DeviceKind};
use crate::transfer::Clock;

/// What the front end asks the cell process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
        json_line(self)
    }

    /// Reads a request line; `None` for one this protocol does not have.
    pub fn parse(line: &str) -> Option<Request> {
        serde_json::from_str(line.trim()).ok()
    }
}

/// The name of the line for page-locked host memory among the devices' (`DeviceStats`).
pub const PINNED: &str = "pinned";

/// One device's memory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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

/// One transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferLine {
    pub seq: u64,
    pub from: Device,
    pub to: Device,
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub devices: BTreeMap<String, DeviceStats>,
    pub transfers: Vec<TransferLine>,
    pub last_seq: u64,
    /// The latest idle releases of the GPUs' caches (`memory::idle`).
    pub idle_releases: Vec<IdleReleaseLine>,
}

/// One idle release: its number, the device, the bytes given back and the idle time before.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IdleReleaseLine {
    pub seq: u64,
    pub device: String,
    pub bytes: u64,
    pub idle_ms: u64,
}

/// A whole reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    Snapshot(Snapshot),
    Released {
        bytes: u64,
    },
    /// `begin` and `sync`: nothing but an acknowledgement.
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
    /// The reply's line, newline included.
    pub fn encode(&self) -> String {
        json_line(self) + "\n"
    }

    /// Reads a whole reply; `None` when it is cut short or is not one.
    pub fn parse(text: &str) -> Option<Reply> {
        serde_json::from_str(text.trim_end()).ok()
    }
}

/// `value` as one line of JSON (its strings' line breaks escaped). Serializing these types
/// cannot fail (no map has other than string keys); were it to, the line says so as an error.
fn json_line(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| {
        let why = format!("the probe could not encode its reply: {e}");
        serde_json::to_string(&Reply::Error(why)).unwrap_or_default()
    })
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
        let copy = |seq, from, to, predicted| TransferLine {
            seq,
            from,
            to,
            bytes: 4_000_000,
            nanos: 1_000_000,
            pinned: false,
            clock: Clock::SimulatedHostCopy,
            predicted,
        };
        snap.transfers
            .push(copy(9, Device::Cpu, Device::Cuda(0), None));
        let on_h100 = Some(("h100".to_string(), 20_000));
        snap.transfers
            .push(copy(10, Device::Cuda(0), Device::Cuda(1), on_h100));
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
            let line = r.encode();
            assert!(!line.contains('\n'), "{line}");
            assert_eq!(Request::parse(&line), Some(r));
        }
        assert_eq!(Request::parse("stats 7"), None, "not this protocol");
        let simulated = |capacity, gpu| DeviceKind::SimulatedGpu {
            capacity,
            stands_for: crate::cost::find(gpu),
        };
        let mut snapshot = two_transfers();
        for (i, kind) in [
            DeviceKind::Cpu,
            DeviceKind::Gpu,
            simulated(3, "h100"),
            simulated(4, "none"),
        ]
        .into_iter()
        .enumerate()
        {
            let name = format!("cuda:{}", i + 1);
            let d = DeviceStats {
                name: name.clone(),
                kind,
                ..DeviceStats::default()
            };
            snapshot.devices.insert(name, d);
        }
        let devices = DeviceList {
            devices: vec![
                "cpu (2 threads)".into(),
                "cuda:0 (simulated) 8.00 GiB".into(),
            ],
            versions: None,
            missing: None,
            real: 0,
            emulated: 2,
            // A driver's message with a line break stays one line on the wire, and reads back.
            no_real_gpu: Some("libcuda.so:\nerror loading".into()),
        };
        let cell_end = Reply::CellEnd {
            found: vec!["index 9 out of range\ncuda:0 checked \\n this\r".into()],
            failed: vec!["error in\nsynchronize".into()],
            still_running: vec!["cuda:1".into()],
            stopped: vec![],
        };
        for reply in [
            Reply::Snapshot(snapshot),
            Reply::Released { bytes: 1 << 21 },
            Reply::Done,
            Reply::Devices(devices),
            cell_end,
            Reply::Error("unknown request".into()),
        ] {
            let line = reply.encode();
            assert_eq!(line.lines().count(), 1, "{line}");
            assert_eq!(Reply::parse(&line), Some(reply));
        }
        let cut = Reply::Snapshot(two_transfers()).encode();
        assert_eq!(Reply::parse(&cut[..cut.len() / 2]), None, "cut short");
    }
}
