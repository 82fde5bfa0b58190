//! The front end's side of `placelab::probe`: asks the cell process for memory stats and
//! transfers over its Unix socket (`strip.rs` turns two snapshots into a cell's memory strip).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceStats {
    pub name: String,
    pub simulated: bool,
    pub allocated: u64,
    pub reserved: u64,
    pub peak: u64,
    pub tensors: u64,
    pub free: u64,
    pub total: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct TransferLine {
    pub seq: u64,
    pub from: String,
    pub to: String,
    pub bytes: u64,
    pub nanos: u64,
    pub pinned: bool,
    pub simulated: bool,
}

/// One answer to `stats`: devices by name, and the transfers asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub devices: BTreeMap<String, DeviceStats>,
    pub transfers: Vec<TransferLine>,
    pub last_seq: u64,
}

#[derive(Debug, Clone)]
pub struct ProbeClient {
    pub path: PathBuf,
}

fn fields(line: &str) -> BTreeMap<&str, &str> {
    line.split_whitespace()
        .skip(1)
        .filter_map(|kv| kv.split_once('='))
        .collect()
}

fn num(f: &BTreeMap<&str, &str>, k: &str) -> u64 {
    f.get(k).and_then(|v| v.parse().ok()).unwrap_or(0)
}

impl ProbeClient {
    /// The raw reply to `request`, or `None` when the cell process is not answering (not started
    /// yet, or restarting).
    pub fn ask(&self, request: &str) -> Option<String> {
        let mut s = std::os::unix::net::UnixStream::connect(&self.path).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(format!("{request}\n").as_bytes()).ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        out.ends_with("end\n").then_some(out)
    }

    /// Stats of every used device, and the transfers after `after_seq`.
    pub fn snapshot(&self, after_seq: u64) -> Option<Snapshot> {
        let reply = self.ask(&format!("stats {after_seq}"))?;
        let mut snap = Snapshot::default();
        for line in reply.lines() {
            let f = fields(line);
            match line.split_whitespace().next() {
                Some("device") => {
                    let d = DeviceStats {
                        name: f.get("name").unwrap_or(&"?").to_string(),
                        simulated: num(&f, "simulated") == 1,
                        allocated: num(&f, "allocated"),
                        reserved: num(&f, "reserved"),
                        peak: num(&f, "peak"),
                        tensors: num(&f, "tensors"),
                        free: num(&f, "free"),
                        total: num(&f, "total"),
                    };
                    snap.devices.insert(d.name.clone(), d);
                }
                Some("transfer") => snap.transfers.push(TransferLine {
                    seq: num(&f, "seq"),
                    from: f.get("from").unwrap_or(&"?").to_string(),
                    to: f.get("to").unwrap_or(&"?").to_string(),
                    bytes: num(&f, "bytes"),
                    nanos: num(&f, "ns"),
                    pinned: num(&f, "pinned") == 1,
                    simulated: num(&f, "simulated") == 1,
                }),
                Some("seq") => snap.last_seq = num(&f, "last"),
                _ => {}
            }
        }
        Some(snap)
    }
}
