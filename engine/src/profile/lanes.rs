//! The profile as lanes of time, one per engine that worked: the host (each op from its call to
//! its return), and on each GPU each stream (each op's work between its CUDA events, copies
//! marked as copies). From them, how much of the copies' time a stream computed beside them:
//! what overlapping a copy with compute buys. GPU times sit on the host's clock from the
//! device's first event in the profile (`OpRecord::gpu_start`); a simulated device has no
//! events, so its work shows on the host lane only.

use std::time::Duration;

use super::{NON_BLOCKING_TO, OpRecord, Profile};
use crate::device::Device;

/// One engine's work over the profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Lane {
    /// `host`, or `cuda:0 default` / `cuda:0 stream 1`.
    pub name: String,
    /// The GPU and stream, for a GPU's lane.
    pub stream: Option<(Device, u32)>,
    pub spans: Vec<Span>,
}

/// One op's time on a lane, from the start of the profile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    pub op: &'static str,
    pub start: Duration,
    pub end: Duration,
    /// A copy (`.to()`), which a GPU's copy engines run beside its kernels.
    pub copy: bool,
}

fn is_copy(op: &OpRecord) -> bool {
    op.name == "to" || op.name == NON_BLOCKING_TO
}

impl Profile {
    /// The host's lane, then one per GPU stream that ran timed work, in device and stream order.
    pub fn lanes(&self) -> Vec<Lane> {
        let host = Lane {
            name: "host".into(),
            stream: None,
            spans: self
                .ops
                .iter()
                .map(|o| Span {
                    op: o.name,
                    start: o.start,
                    end: o.start + o.measured,
                    copy: is_copy(o),
                })
                .collect(),
        };
        let mut gpu: std::collections::BTreeMap<(Device, u32), Vec<Span>> = Default::default();
        for o in &self.ops {
            if let (Some(start), Some(time)) = (o.gpu_start, o.gpu_time) {
                let span = Span {
                    op: o.name,
                    start,
                    end: start + time,
                    copy: is_copy(o),
                };
                gpu.entry((o.device, o.stream)).or_default().push(span);
            }
        }
        std::iter::once(host)
            .chain(gpu.into_iter().map(|((device, stream), spans)| Lane {
                name: match stream {
                    0 => format!("{device} default"),
                    s => format!("{device} stream {s}"),
                },
                stream: Some((device, stream)),
                spans,
            }))
            .collect()
    }

    /// The share of the GPU copies' time during which the same GPU ran other work (kernels, on
    /// any stream): "copies hidden behind compute". `None` when no copy was timed on a GPU.
    pub fn copies_hidden(&self) -> Option<f64> {
        let lanes = self.lanes();
        let on = |device: Device, copy: bool| -> Vec<Span> {
            lanes
                .iter()
                .filter(|l| l.stream.is_some_and(|(d, _)| d == device))
                .flat_map(|l| l.spans.iter().filter(|s| s.copy == copy).copied())
                .collect()
        };
        let (mut copying, mut hidden) = (Duration::ZERO, Duration::ZERO);
        for lane in lanes.iter().filter(|l| l.stream.is_some()) {
            let (device, _) = lane.stream.expect("a GPU lane");
            let compute = on(device, false);
            for c in lane.spans.iter().filter(|s| s.copy) {
                copying += c.end - c.start;
                hidden += covered(c, &compute);
            }
        }
        (copying > Duration::ZERO).then(|| hidden.as_secs_f64() / copying.as_secs_f64())
    }
}

/// How much of `span` the union of `others` covers.
fn covered(span: &Span, others: &[Span]) -> Duration {
    let mut parts: Vec<(Duration, Duration)> = others
        .iter()
        .map(|o| (o.start.max(span.start), o.end.min(span.end)))
        .filter(|(a, b)| a < b)
        .collect();
    parts.sort();
    let (mut total, mut reach) = (Duration::ZERO, span.start);
    for (a, b) in parts {
        let a = a.max(reach);
        if b > a {
            total += b - a;
            reach = b;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Phase;

    fn op(name: &'static str, stream: u32, gpu: Option<(u64, u64)>) -> OpRecord {
        let ms = Duration::from_millis;
        OpRecord {
            name,
            phase: Phase::Forward,
            grad_fn: None,
            device: Device::Cuda(0),
            start: ms(0),
            measured: ms(1),
            gpu_time: gpu.map(|(a, b)| ms(b - a)),
            gpu_start: gpu.map(|(a, _)| ms(a)),
            stream,
            predicted: None,
            allocated: 0,
            freed: 0,
        }
    }

    #[test]
    fn a_copy_is_hidden_as_far_as_another_streams_kernels_cover_it() {
        // The copy runs 0–10 ms on stream 1; kernels on the default stream 5–8 and 7–20 ms.
        let p = Profile {
            ops: vec![
                op(NON_BLOCKING_TO, 1, Some((0, 10))),
                op("matmul", 0, Some((5, 8))),
                op("add", 0, Some((7, 20))),
                op("sum", 0, None), // never timed: on no GPU lane
            ],
            ..Profile::default()
        };
        let lanes = p.lanes();
        let names: Vec<&str> = lanes.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["host", "cuda:0 default", "cuda:0 stream 1"]);
        assert_eq!(lanes[0].spans.len(), 4, "every op is on the host's lane");
        assert_eq!(lanes[1].spans.len(), 2);
        let hidden = p.copies_hidden().unwrap();
        assert!((hidden - 0.5).abs() < 1e-9, "{hidden}");
        let serial = Profile {
            ops: vec![op("to", 0, Some((0, 10))), op("matmul", 0, Some((10, 30)))],
            ..Profile::default()
        };
        assert_eq!(serial.copies_hidden(), Some(0.0));
        let no_copy = Profile {
            ops: vec![op("matmul", 0, Some((0, 3)))],
            ..Profile::default()
        };
        assert_eq!(no_copy.copies_hidden(), None);
    }
}
