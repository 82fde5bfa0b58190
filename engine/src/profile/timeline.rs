//! A profile's memory timeline as data: each device's allocated bytes as steps over the code's
//! run, and the bands of its phases. `display/timeline.rs` draws them.

use std::time::Duration;

use super::{Phase, Profile};
use crate::device::Device;

impl Profile {
    /// `device`'s allocated bytes as steps: (time, bytes), from the start to the end.
    pub fn steps(&self, device: &Device) -> Vec<(Duration, u64)> {
        let Some(start) = self.start_allocated.get(device) else {
            return Vec::new();
        };
        let mut steps = vec![(Duration::ZERO, *start)];
        steps.extend(
            self.memory
                .iter()
                .filter(|p| p.device == *device)
                .map(|p| (p.at, p.allocated)),
        );
        let last = steps.last().map_or(0, |s| s.1);
        steps.push((
            self.wall.max(steps.last().map_or(Duration::ZERO, |s| s.0)),
            last,
        ));
        steps
    }

    /// The runs of ops in one phase: (phase, from, to).
    pub(crate) fn phase_bands(&self) -> Vec<(Phase, Duration, Duration)> {
        let mut bands: Vec<(Phase, Duration, Duration)> = Vec::new();
        for op in &self.ops {
            let end = op.start + op.measured;
            match bands.last_mut() {
                // A frame (the autograd engine) is recorded after the ops inside it.
                Some(b) if b.0 == op.phase => {
                    b.1 = b.1.min(op.start);
                    b.2 = b.2.max(end);
                }
                _ => bands.push((op.phase, op.start, end)),
            }
        }
        bands
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::base::dtype::DType;
    use crate::base::op::Op;
    use crate::profile::{MadeBlock, MemoryPoint, OpRecord, Peak};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn op(phase: Phase, start: u64, took: u64) -> OpRecord {
        OpRecord::on_host(Op::Matmul, phase, Device::Cpu, ms(start), ms(took))
    }

    /// A profile to draw: the CPU holds 100 B, rises to 400 B at 2 ms (the peak, a 300 B matmul output made in the
    /// backward pass) and falls to 200 B at 6 ms; the code takes 8 ms.
    pub(crate) fn example() -> Profile {
        let block = MadeBlock {
            bytes: 300,
            dtype: DType::F32,
            numel: 75,
            op: Some(Op::Matmul),
            phase: Phase::Backward,
            grad_fn: Some(Op::Matmul),
            engine_buffer: None,
        };
        let cpu = Device::Cpu;
        let mut p = Profile {
            wall: ms(8),
            ops: vec![
                op(Phase::Forward, 0, 1),
                op(Phase::Backward, 1, 5),
                op(Phase::Optimizer, 6, 1),
            ],
            memory: vec![
                MemoryPoint {
                    at: ms(2),
                    device: cpu,
                    allocated: 400,
                },
                MemoryPoint {
                    at: ms(6),
                    device: cpu,
                    allocated: 200,
                },
            ],
            ..Profile::default()
        };
        p.start_allocated.insert(cpu, 100);
        let peak = Peak {
            device: cpu,
            allocated: 400,
            at: ms(2),
            reached_by: block.clone(),
            held: vec![block],
        };
        p.peaks.insert(cpu, peak);
        p
    }

    #[test]
    fn the_timeline_steps_from_the_start_through_every_change_to_the_end() {
        let steps = example().steps(&Device::Cpu);
        assert_eq!(
            steps,
            [(ms(0), 100), (ms(2), 400), (ms(6), 200), (ms(8), 200)]
        );
        assert_eq!(example().steps(&Device::Cuda(0)), []);
    }
}
