//! The order between streams, as the profile sees it: an event recorded on a stream marks how
//! many ops the profile had recorded then, and a stream that waits for the event waits, from its
//! next op on, for the marked stream's ops among those. A predicted timeline (`predicted_lanes`)
//! replays the ops with these waits; measured lanes need none, the GPU kept them.

use super::record::with_recording;
use super::{StreamMark, StreamWait};
use crate::device::Device;

/// Marks `stream`'s work so far, if a profile is recording (`Event::record` calls it).
pub(crate) fn stream_mark(device: Device, stream: u32) -> Option<StreamMark> {
    let mut mark = None;
    with_recording(|rec| {
        mark = Some(StreamMark {
            recording: rec.id,
            device,
            stream,
            ops: rec.profile.ops.len(),
        })
    });
    mark
}

/// Records that `stream` of `device` waits for the work `mark` marked (`Event::wait` calls it),
/// if the mark was made in the profile recording now. A wait on another device's stream is
/// left out: a predicted timeline replays each device apart.
pub(crate) fn stream_waited(mark: StreamMark, device: Device, stream: u32) {
    with_recording(|rec| {
        if mark.recording == rec.id && mark.device == device && mark.stream != stream {
            rec.profile.waits.push(StreamWait {
                device,
                stream,
                waited: mark.stream,
                after: mark.ops,
                from_op: rec.profile.ops.len(),
            });
        }
    });
}
