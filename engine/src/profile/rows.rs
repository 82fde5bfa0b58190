//! A profile's ops grouped as a learner reads them: one row per op name within each phase
//! (PyTorch's `key_averages()`), with its calls, measured time (on a GPU: host time and GPU time
//! apart, as torch.profiler's CPU and CUDA columns), predicted time and the memory it took and
//! gave back. `display/profile_table.rs` draws them.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Phase, Profile};
use crate::base::op::{Op, row_label};
use crate::device::Device;

/// The ops of one name, in one phase, on one device.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub phase: Phase,
    pub op: Op,
    /// In the backward phase, the op whose backward ran it.
    pub grad_fn: Option<Op>,
    /// The op's label: its name, with the backward it ran for in the backward phase
    /// (`matmul (in matmul's backward)`, `add (into .grad)`).
    pub name: String,
    pub device: Device,
    pub calls: usize,
    /// Host time (on a GPU, the time to queue the work, unless the profile blocked).
    pub measured: Duration,
    /// On a GPU: the ops' time on its stream, between CUDA events.
    pub gpu_time: Option<Duration>,
    pub predicted: Option<Duration>,
    pub allocated: u64,
    pub freed: u64,
}

impl Profile {
    /// The table's rows: by phase, then by measured time, longest first.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows: BTreeMap<(Phase, Op, Option<Op>, Device), Row> = BTreeMap::new();
        for op in &self.ops {
            let row = rows
                .entry((op.phase, op.op, op.grad_fn, op.device))
                .or_insert_with(|| Row {
                    phase: op.phase,
                    op: op.op,
                    grad_fn: op.grad_fn,
                    name: row_label(op.op, op.grad_fn),
                    device: op.device,
                    calls: 0,
                    measured: Duration::ZERO,
                    gpu_time: None,
                    predicted: None,
                    allocated: 0,
                    freed: 0,
                });
            row.calls += 1;
            row.measured += op.measured;
            if let Some(p) = op.predicted {
                row.predicted = Some(row.predicted.unwrap_or_default() + p);
            }
            if let Some(g) = op.gpu_time {
                row.gpu_time = Some(row.gpu_time.unwrap_or_default() + g);
            }
            row.allocated += op.allocated;
            row.freed += op.freed;
        }
        let mut rows: Vec<Row> = rows.into_values().collect();
        rows.sort_by(|a, b| a.phase.cmp(&b.phase).then(b.measured.cmp(&a.measured)));
        rows
    }

    /// The phases that ran, in order.
    pub(crate) fn phases(&self) -> Vec<Phase> {
        let mut phases: Vec<Phase> = self.ops.iter().map(|o| o.phase).collect();
        phases.sort();
        phases.dedup();
        phases
    }

    /// Whether a device stands for a named GPU, so the ops have predicted times.
    pub(crate) fn predicts(&self) -> bool {
        !self.stands_for.is_empty()
    }

    /// The ops' time on the GPU's stream (CUDA events), if any ran on a GPU.
    pub fn gpu_total(&self) -> Option<Duration> {
        let mut timed = self.ops.iter().filter_map(|o| o.gpu_time).peekable();
        timed.peek()?;
        Some(timed.sum())
    }
}
