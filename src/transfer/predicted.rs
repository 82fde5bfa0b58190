//! What a transfer would have taken on the named GPU a simulated device stands for
//! (`--as h100`): the measured host copy stays the transfer's time, and this is shown beside it,
//! labelled as predicted. Nothing is predicted for real or emulated GPUs, the CPU, or a
//! simulated device that stands for no named GPU.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

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
    } else if pinned {
        CopyRoute::Pinned
    } else {
        CopyRoute::Pageable
    };
    let p = model::copy(gpu, route, bytes as u64, host_memcpy_gbps());
    Some(PredictedCopy {
        gpu,
        duration: Duration::from_secs_f64(p.seconds),
        link: p.link,
    })
}

/// This host's memcpy rate in GB/s, measured once per process: one thread copying 32 MiB
/// between two buffers it has already touched, best of three. The driver stages pageable memory
/// through its pinned buffer at about this rate. (A simulated copy's own time is no measure of
/// it: it includes the first touch of the device's fresh pages.)
pub fn host_memcpy_gbps() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        let n = 32 << 20;
        let src = vec![1u8; n];
        let mut dst = vec![0u8; n];
        (0..3)
            .map(|_| {
                let start = Instant::now();
                dst.copy_from_slice(&src);
                std::hint::black_box(&mut dst);
                n as f64 / start.elapsed().as_secs_f64().max(1e-9) / 1e9
            })
            .fold(0.0, f64::max)
    })
}
