//! Frames: code around ops that is not an op itself, recorded with its own time.

use std::time::{Duration, Instant};

use super::OpRecord;
use super::record::{OPEN, recording, with_recording};
use crate::base::op::Op;
use crate::device::Device;

/// Code around ops that is not an op itself (the autograd engine walking the graph): recorded
/// when it drops as one row with its own time, the time of the ops inside it taken out, as
/// PyTorch's profiler gives `autograd::engine::evaluate_function` its self time.
pub struct Frame {
    op: Op,
    device: Device,
    start: Instant,
    recorded_before: Duration,
}

/// Starts the frame `name` on `device`, if a profile records and no op is open on this thread.
pub fn frame(op: Op, device: Device) -> Option<Frame> {
    if !recording() || OPEN.with(|o| o.borrow().is_some()) {
        return None;
    }
    let mut recorded_before = Duration::ZERO;
    with_recording(|rec| recorded_before = rec.recorded);
    Some(Frame {
        op,
        device,
        start: Instant::now(),
        recorded_before,
    })
}

impl Drop for Frame {
    fn drop(&mut self) {
        let elapsed = self.start.elapsed();
        with_recording(|rec| {
            let inside = rec.recorded.saturating_sub(self.recorded_before);
            let own = elapsed.saturating_sub(inside);
            rec.recorded += own;
            let start = self.start.saturating_duration_since(rec.start);
            (rec.profile.ops).push(OpRecord::on_host(
                self.op,
                rec.phase,
                self.device,
                start,
                own,
            ));
        });
    }
}
