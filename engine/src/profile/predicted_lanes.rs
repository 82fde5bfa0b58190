//! The lanes a simulated device predicts for the GPU it stands for. A simulated device runs its
//! kernels on the CPU as they are queued, so nothing overlaps there; the prediction replays the
//! recorded ops through the cost model on the GPU's engines instead: the host queues each op
//! (`step_op` a kernel, `host_op` a non-blocking copy) or waits for it (a blocking copy), one
//! compute engine runs the kernels of every stream one after another, a copy engine each way runs
//! the copies, and each stream's work keeps its order and the waits between streams that the
//! code asked for (`profile/waits.rs`).

use std::collections::HashMap;
use std::time::Duration;

use super::lanes::{Engine, EngineSpans, Span, add_span, in_order};
use super::{OpRecord, Profile, StreamWait};
use crate::base::op::Op;
use crate::cost::model::{self, Constants};
use crate::device::Device;

/// The replay's state, in seconds from the start of the profile.
#[derive(Default)]
struct Replay {
    /// When the host is free to queue the next op.
    host: f64,
    host_spans: Vec<Span>,
    /// When each engine is free: a GPU's compute engine (`Engine::Stream(gpu, 0)` stands for
    /// every stream's kernels), and its copy engines.
    free: HashMap<Engine, f64>,
    /// When the work queued on each stream so far is done.
    stream_done: HashMap<(Device, u32), f64>,
    /// For each wait, the waited stream's end at the mark, once the replay has passed it.
    marked: HashMap<usize, f64>,
    gpu: EngineSpans,
}

fn span(op: Op, start: f64, end: f64, copy: bool) -> Span {
    Span {
        op,
        start: Duration::from_secs_f64(start),
        end: Duration::from_secs_f64(end),
        copy,
    }
}

impl Replay {
    /// Before op `i`: notes where waited streams stood at their marks (the waits `marked_at`
    /// op `i`), then holds back the streams that wait from op `i` on (`waiting_from`).
    fn waits_before(&mut self, waits: &[StreamWait], marked_at: &[usize], waiting_from: &[usize]) {
        for &k in marked_at {
            let w = &waits[k];
            let done = self.stream_done.get(&(w.device, w.waited)).copied();
            self.marked.insert(k, done.unwrap_or(0.0));
        }
        for &k in waiting_from {
            let w = &waits[k];
            let at = self.marked.get(&k).copied().unwrap_or(0.0);
            let done = self.stream_done.entry((w.device, w.stream)).or_default();
            *done = done.max(at);
        }
    }

    /// Queues op `o`, whose work takes `seconds` on the GPU it is priced for.
    fn op(&mut self, o: &OpRecord, seconds: f64, c: &Constants) {
        let engine = Engine::of(o);
        let Some(gpu) = engine.gpu() else {
            return self.host_work(o);
        };
        let copy = o.copied_from.is_some();
        let blocking = copy && o.op != Op::ToNonBlocking;
        // A copy to the host is ordered on the GPU's default stream (the host's current stream
        // is the CPU's); everything else on the stream it was queued on.
        let stream = (gpu, if o.device == gpu { o.stream } else { 0 });
        let runs_on = if copy { engine } else { Engine::Stream(gpu, 0) };
        let queueing = match (copy, blocking) {
            (_, true) => 0.0,
            (true, false) => c.host_op,
            (false, _) => c.step_op,
        };
        let issued = self.host + queueing;
        let free = self.free.get(&runs_on).copied().unwrap_or(0.0);
        let start = issued
            .max(free)
            .max(self.stream_done.get(&stream).copied().unwrap_or(0.0));
        // Back to back behind another kernel, a kernel's fixed cost hides behind the one before.
        let took = if !copy && free >= issued {
            model::queued_with(c, seconds)
        } else {
            seconds
        };
        let end = start + took;
        self.free.insert(runs_on, end);
        self.stream_done.insert(stream, end);
        add_span(&mut self.gpu, engine, span(o.op, start, end, copy));
        let host_end = if blocking {
            end + c.blocking_copy_host
        } else {
            issued
        };
        self.host_spans.push(span(o.op, self.host, host_end, copy));
        self.host = host_end;
    }

    /// An op no GPU stands for: the host's own work, taking what it took here.
    fn host_work(&mut self, o: &OpRecord) {
        let end = self.host + o.measured.as_secs_f64();
        self.host_spans.push(span(o.op, self.host, end, false));
        self.host = end;
    }
}

impl Profile {
    /// The lanes the code is predicted to have on the GPU its simulated devices stand for: the
    /// ops replayed through the cost model (see the module's comment). `None` when no op was
    /// priced for a GPU.
    pub fn predicted_lanes(&self) -> Option<Vec<super::Lane>> {
        self.predicted_total()?;
        let c = model::FITTED;
        // Each wait indexed once by the op it marks at and the op it holds back from.
        let mut marked_at = vec![Vec::new(); self.ops.len() + 1];
        let mut waiting_from = vec![Vec::new(); self.ops.len() + 1];
        for (k, w) in self.waits.iter().enumerate() {
            marked_at[w.after.min(self.ops.len())].push(k);
            waiting_from[w.from_op.min(self.ops.len())].push(k);
        }
        let mut replay = Replay::default();
        for (i, o) in self.ops.iter().enumerate() {
            replay.waits_before(&self.waits, &marked_at[i], &waiting_from[i]);
            match o.predicted {
                Some(p) => replay.op(o, p.as_secs_f64(), &c),
                None => replay.host_work(o),
            }
        }
        Some(in_order(replay.host_spans, replay.gpu))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::gpus::find;
    use crate::profile::Phase;

    fn op(name: Op, device: Device, copied_from: Option<Device>, ms: f64) -> OpRecord {
        let measured = Duration::from_micros(50);
        OpRecord {
            copied_from,
            predicted: Some(Duration::from_secs_f64(ms / 1e3)),
            ..OpRecord::on_host(name, Phase::Forward, device, Duration::ZERO, measured)
        }
    }

    #[test]
    fn a_blocking_copy_holds_the_host_and_the_kernels_queue_behind_it() {
        let (gpu, cpu) = (Device::Cuda(0), Device::Cpu);
        let p = Profile {
            ops: vec![
                op(Op::To, gpu, Some(cpu), 2.0),
                op(Op::Matmul, gpu, None, 3.0),
                op(Op::To, cpu, Some(gpu), 1.0),
            ],
            stands_for: [(gpu, find("h100").unwrap())].into(),
            ..Profile::default()
        };
        let lanes = p.engine_lanes();
        assert_eq!(lanes.predicted_for.unwrap().key, "h100");
        let names: Vec<&str> = lanes.lanes.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "host",
                "cuda:0 default",
                "cuda:0 copies HtoD",
                "cuda:0 copies DtoH"
            ]
        );
        let [host, kernels, up, down] = &lanes.lanes[..] else {
            unreachable!()
        };
        // The host waits out the upload, queues the GEMM, then waits for the GEMM and the
        // download behind it on the default stream.
        assert!(host.spans[0].end > up.spans[0].end);
        assert!(kernels.spans[0].start >= host.spans[0].end);
        assert!(down.spans[0].start >= kernels.spans[0].end);
        assert!(host.spans[2].end > down.spans[0].end);
        assert_eq!(lanes.copies_hidden(), Some(0.0));
    }
}
