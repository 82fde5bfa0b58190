//! The profile as lanes of time, one per engine that worked: the host (each op from its call to
//! its return), each GPU stream's kernels (between their CUDA events), and each GPU's copies
//! one way, as a copy engine each way runs them beside the kernels. From them, how much of the
//! copies' time the GPU computed beside them: what overlapping a copy with compute buys. GPU
//! times sit on the host's clock from the device's first event in the profile
//! (`OpRecord::gpu_start`). A simulated device has no events: its lanes are predicted
//! (`predicted_lanes.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{OpRecord, Profile};
use crate::base::op::Op;
use crate::cost::gpus::GpuSpec;
use crate::device::Device;

/// Which way a copy moves bytes, named as Nsight Systems names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CopyDirection {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
}

impl CopyDirection {
    fn of(from: Device, to: Device) -> CopyDirection {
        match (from.is_cuda(), to.is_cuda()) {
            (false, _) => CopyDirection::HostToDevice,
            (true, false) => CopyDirection::DeviceToHost,
            (true, true) => CopyDirection::DeviceToDevice,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            CopyDirection::HostToDevice => "HtoD",
            CopyDirection::DeviceToHost => "DtoH",
            CopyDirection::DeviceToDevice => "DtoD",
        }
    }
}

/// An engine that worked during the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Engine {
    Host,
    /// A GPU stream's kernels (0: the default stream).
    Stream(Device, u32),
    /// A GPU's copies one way.
    Copies(Device, CopyDirection),
}

impl Engine {
    /// The engine of an op's work on its GPU: a copy's engine, else its stream.
    pub(super) fn of(op: &OpRecord) -> Engine {
        match op.copied_from {
            Some(from) => {
                let gpu = if op.device.is_cuda() { op.device } else { from };
                Engine::Copies(gpu, CopyDirection::of(from, op.device))
            }
            None => Engine::Stream(op.device, op.stream),
        }
    }

    pub(super) fn gpu(self) -> Option<Device> {
        match self {
            Engine::Host => None,
            Engine::Stream(d, _) | Engine::Copies(d, _) => Some(d),
        }
    }

    fn name(self) -> String {
        match self {
            Engine::Host => "host".into(),
            Engine::Stream(d, 0) => format!("{d} default"),
            Engine::Stream(d, s) => format!("{d} stream {s}"),
            Engine::Copies(d, dir) => format!("{d} copies {}", dir.label()),
        }
    }

    /// Lanes in order: the host, then per GPU its streams, then its copies.
    fn order(self) -> (Option<Device>, u8, u32) {
        match self {
            Engine::Host => (None, 0, 0),
            Engine::Stream(d, s) => (Some(d), 1, s),
            Engine::Copies(d, dir) => (Some(d), 2, dir as u32),
        }
    }
}

/// One engine's work over the profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Lane {
    /// `host`, `cuda:0 default`, `cuda:0 stream 1`, `cuda:0 copies HtoD`.
    pub name: String,
    pub engine: Engine,
    pub spans: Vec<Span>,
}

/// One op's time on a lane, from the start of the profile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    pub op: Op,
    pub start: Duration,
    pub end: Duration,
    /// A copy (`.to()`), which a GPU's copy engines run beside its kernels.
    pub copy: bool,
}

/// The lanes a timeline shows: measured where a GPU timed its work with events, else predicted
/// for the GPU the simulated devices stand for.
#[derive(Debug, Clone, PartialEq)]
pub struct Lanes {
    pub lanes: Vec<Lane>,
    /// The GPU a predicted timeline stands for; `None` for a measured one.
    pub predicted_for: Option<&'static GpuSpec>,
}

impl Lanes {
    /// When the last engine finished: the timeline's length.
    pub fn end(&self) -> Duration {
        (self.lanes.iter())
            .flat_map(|l| l.spans.iter().map(|s| s.end))
            .max()
            .unwrap_or_default()
    }

    /// The share of the GPU copies' time during which the same GPU ran kernels (on any stream):
    /// "copies hidden behind compute". `None` when no copy ran on a GPU.
    pub fn copies_hidden(&self) -> Option<f64> {
        let (mut copying, mut hidden) = (Duration::ZERO, Duration::ZERO);
        for lane in &self.lanes {
            let Engine::Copies(device, _) = lane.engine else {
                continue;
            };
            let compute: Vec<Span> = (self.lanes.iter())
                .filter(|l| matches!(l.engine, Engine::Stream(d, _) if d == device))
                .flat_map(|l| l.spans.iter().copied())
                .collect();
            for c in &lane.spans {
                copying += c.end - c.start;
                hidden += covered(c, &compute);
            }
        }
        (copying > Duration::ZERO).then(|| hidden.as_secs_f64() / copying.as_secs_f64())
    }
}

/// The GPUs' spans by engine, kept in the lanes' order (`Engine::order`).
pub(super) type EngineSpans = BTreeMap<(Option<Device>, u8, u32), (Engine, Vec<Span>)>;

/// The host's lane and the GPUs' lanes in order.
pub(super) fn in_order(host: Vec<Span>, gpu: EngineSpans) -> Vec<Lane> {
    let host = Lane {
        name: "host".into(),
        engine: Engine::Host,
        spans: host,
    };
    std::iter::once(host)
        .chain(gpu.into_values().map(|(engine, spans)| Lane {
            name: engine.name(),
            engine,
            spans,
        }))
        .collect()
}

/// Adds `span` to `engine`'s lane.
pub(super) fn add_span(lanes: &mut EngineSpans, engine: Engine, span: Span) {
    (lanes
        .entry(engine.order())
        .or_insert((engine, Vec::new()))
        .1)
        .push(span);
}

impl Profile {
    /// The lanes measured: the host's, then per GPU each stream's kernels and each direction's
    /// copies that CUDA events timed.
    pub fn lanes(&self) -> Vec<Lane> {
        let host = (self.ops.iter())
            .map(|o| Span {
                op: o.op,
                start: o.start,
                end: o.start + o.measured,
                copy: o.copied_from.is_some(),
            })
            .collect();
        let mut gpu = EngineSpans::new();
        for o in &self.ops {
            if let (Some(start), Some(time)) = (o.gpu_start, o.gpu_time) {
                let span = Span {
                    op: o.op,
                    start,
                    end: start + time,
                    copy: o.copied_from.is_some(),
                };
                add_span(&mut gpu, Engine::of(o), span);
            }
        }
        in_order(host, gpu)
    }

    /// The measured lanes where a GPU timed work, else the predicted ones where the code ran on
    /// a simulated device that stands for a GPU, else the host's lane alone.
    pub fn engine_lanes(&self) -> Lanes {
        let measured = self.lanes();
        if measured.len() == 1
            && let Some(lanes) = self.predicted_lanes()
        {
            return Lanes {
                lanes,
                predicted_for: self.stands_for.values().next().copied(),
            };
        }
        Lanes {
            lanes: measured,
            predicted_for: None,
        }
    }

    /// The measured share of the GPU copies' time hidden behind kernels (`Lanes::copies_hidden`).
    pub fn copies_hidden(&self) -> Option<f64> {
        Lanes {
            lanes: self.lanes(),
            predicted_for: None,
        }
        .copies_hidden()
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
    use crate::base::op::BinaryOp;
    use crate::profile::Phase;

    fn op(name: Op, stream: u32, gpu: Option<(u64, u64)>) -> OpRecord {
        let ms = Duration::from_millis;
        let copy = matches!(name, Op::To | Op::ToNonBlocking);
        OpRecord {
            gpu_time: gpu.map(|(a, b)| ms(b - a)),
            gpu_start: gpu.map(|(a, _)| ms(a)),
            stream,
            copied_from: copy.then_some(Device::Cpu),
            ..OpRecord::on_host(name, Phase::Forward, Device::Cuda(0), ms(0), ms(1))
        }
    }

    #[test]
    fn a_copy_is_hidden_as_far_as_another_streams_kernels_cover_it() {
        // The copy runs 0–10 ms on stream 1; kernels on the default stream 5–8 and 7–20 ms.
        let p = Profile {
            ops: vec![
                op(Op::ToNonBlocking, 1, Some((0, 10))),
                op(Op::Matmul, 0, Some((5, 8))),
                op(Op::Binary(BinaryOp::Add), 0, Some((7, 20))),
                op(Op::Sum, 0, None), // never timed: on no GPU lane
            ],
            ..Profile::default()
        };
        let lanes = p.lanes();
        let names: Vec<&str> = lanes.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["host", "cuda:0 default", "cuda:0 copies HtoD"]);
        assert_eq!(lanes[0].spans.len(), 4, "every op is on the host's lane");
        assert_eq!(lanes[1].spans.len(), 2);
        let hidden = p.copies_hidden().unwrap();
        assert!((hidden - 0.5).abs() < 1e-9, "{hidden}");
        let serial = Profile {
            ops: vec![
                op(Op::To, 0, Some((0, 10))),
                op(Op::Matmul, 0, Some((10, 30))),
            ],
            ..Profile::default()
        };
        assert_eq!(serial.copies_hidden(), Some(0.0));
        let no_copy = Profile {
            ops: vec![op(Op::Matmul, 0, Some((0, 3)))],
            ..Profile::default()
        };
        assert_eq!(no_copy.copies_hidden(), None);
    }
}
