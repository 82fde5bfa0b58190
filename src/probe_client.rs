//! The front end's side of `placelab::probe`: asks the cell process for memory stats and
//! transfers over its Unix socket, in the protocol of `placelab::probe::wire` (`strip.rs` turns
//! two snapshots into a cell's memory strip).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

pub use placelab::cuda::DeviceList;
pub use placelab::probe::wire::{
    DeviceStats, IdleReleaseLine, PINNED, Reply, Request, Snapshot, TransferLine,
};

/// How long an answer may take once the cell process took the request. Its probe thread answers
/// whatever the cell does, and a process that is gone closes the socket at once, so only a
/// loaded machine makes this wait: a CI lane's terminal test lost an interrupted cell's error
/// and memory strip to the 2 s it used to be, beside two busy loops and two other lanes.
pub const PROBE_PATIENCE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct ProbeClient {
    pub path: PathBuf,
}

impl ProbeClient {
    /// The reply to `request`, or `None` when the cell process is not answering (not started
    /// yet, or restarting).
    pub fn ask(&self, request: Request) -> Option<Reply> {
        let mut s = std::os::unix::net::UnixStream::connect(&self.path).ok()?;
        s.set_read_timeout(Some(PROBE_PATIENCE)).ok()?;
        s.write_all(format!("{}\n", request.encode()).as_bytes())
            .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        Reply::parse(&out)
    }

    /// Stats of every used device, and the transfers after `after_seq`.
    pub fn snapshot(&self, after_seq: u64) -> Option<Snapshot> {
        match self.ask(Request::Stats { after_seq })? {
            Reply::Snapshot(s) => Some(s),
            _ => None,
        }
    }
}
