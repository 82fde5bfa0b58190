//! What a transfer would have taken on the named GPU a simulated device stands for
//! (`--as h100`): the measured host copy stays the transfer's time, and this is shown beside it,
//! labelled as predicted. Nothing is predicted for real or emulated GPUs, the CPU, or a
//! simulated device that stands for no named GPU.

use std::time::Duration;

use crate::cost::GpuSpec;
use crate::cost::model::{self, CopyRoute};
use crate::device::Device;
use crate::device::registry::stands_for;

/// A transfer's predicted time on a named GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictedCopy {
    /// The GPU the device stands for.
    pub gpu: &'static GpuSpec,
    pub duration: Duration,
    /// The link the model priced: "PCIe 5 ×16, pinned", "NVLink, 450 GB/s each way".
    pub link: String,
}

/// The prediction for a copy of `bytes` from `from` to `to` (`pinned`: from or to page-locked
/// host memory) that was timed on a simulated device, if one of them stands for a named GPU.
pub(crate) fn of(from: Device, to: Device, bytes: usize, pinned: bool) -> Option<PredictedCopy> {
    let gpu = stands_for(&to).or_else(|| stands_for(&from))?;
    let route = if from.is_cuda() && to.is_cuda() {
        CopyRoute::BetweenGpus
    } else {
        CopyRoute::host(pinned, to.is_cuda())
    };
    let p = model::copy(gpu, route, bytes as u64);
    Some(PredictedCopy {
        gpu,
        duration: Duration::from_secs_f64(p.seconds),
        link: p.link,
    })
}
