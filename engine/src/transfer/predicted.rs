//! What a transfer would have taken on the named GPU a simulated device stands for
//! (`--as h100`): the measured host copy stays the transfer's time, and this is shown beside it,
//! labelled as predicted. Nothing is predicted for real or emulated GPUs, the CPU, or a
//! simulated device that stands for no named GPU.

use std::time::Duration;

use crate::cost::GpuSpec;
use crate::cost::model::{self, CopyRoute};
use crate::device::{Device, DeviceKind};

/// A transfer's predicted time on a named GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictedCopy {
    /// The GPU the device stands for.
    pub gpu: &'static GpuSpec,
    pub duration: Duration,
    /// What the copy would hold the host there. A blocking copy (and a non-blocking one from
    /// pageable memory, which the driver stages before it returns): its time between events
    /// plus the call into the driver, the wait and waking up (`Constants::blocking_copy_host`,
    /// about 15 µs: a 4 KiB upload holds an H200's host about 19 µs, its events 4 µs apart). A
    /// non-blocking copy from pinned memory: its queueing alone, as a lone op's (`host_op`).
    pub host_wait: Duration,
    /// The link the model priced: "PCIe 5 ×16, pinned", "NVLink, 450 GB/s each way".
    pub link: String,
    /// What placelab measured on that GPU for the nearest case, where it has a run there
    /// (boxed: every transfer record carries this struct).
    pub measured: Option<Box<MeasuredCopy>>,
}

/// A copy placelab measured on a real GPU of the kind predicted: the same route, the size
/// nearest to the predicted copy's (`cost::measured`).
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredCopy {
    pub bytes: u64,
    /// Its time between CUDA events.
    pub duration: Duration,
    /// The run's date (`2026-11-27`).
    pub date: String,
    /// The model's error on that copy: (predicted − measured) / measured.
    pub model_error: f64,
}

/// The prediction for a copy of `bytes` from `from` to `to` (`pinned`: from or to page-locked
/// host memory; `waits`: the call returned once the copy was done) that was timed on a
/// simulated device, if one of them stands for a named GPU.
pub(crate) fn of(
    from: Device,
    to: Device,
    bytes: usize,
    pinned: bool,
    waits: bool,
) -> Option<PredictedCopy> {
    let stands_for = |d: Device| d.kind().ok().and_then(DeviceKind::stands_for);
    let gpu = stands_for(to).or_else(|| stands_for(from))?;
    Some(on(gpu, from, to, bytes, pinned, waits))
}

/// What a copy from `from` to `to` would take on `gpu` (a real GPU's copy priced as another's,
/// under `profile::profile_as`).
pub(crate) fn on(
    gpu: &'static GpuSpec,
    from: Device,
    to: Device,
    bytes: usize,
    pinned: bool,
    waits: bool,
) -> PredictedCopy {
    let route = if from.is_cuda() && to.is_cuda() {
        CopyRoute::BetweenGpus
    } else {
        CopyRoute::host(pinned, to.is_cuda())
    };
    let p = model::copy(gpu, route, bytes as u64);
    let host_wait = match waits {
        true => p.seconds + model::FITTED.blocking_copy_host,
        false => model::FITTED.host_op,
    };
    PredictedCopy {
        gpu,
        duration: Duration::from_secs_f64(p.seconds),
        host_wait: Duration::from_secs_f64(host_wait),
        link: p.link,
        measured: measured_near(gpu, route, to.is_cuda(), bytes as u64).map(Box::new),
    }
}

/// The copy placelab measured on `gpu`'s kind along `route` nearest in size to `bytes`
/// (`to_device`: which way a pinned copy went).
pub fn measured_near(
    gpu: &'static GpuSpec,
    route: CopyRoute,
    to_device: bool,
    bytes: u64,
) -> Option<MeasuredCopy> {
    let kind = match (route, to_device) {
        (CopyRoute::Pinned, true) => "h2d_pinned",
        (CopyRoute::Pinned, false) => "d2h_pinned",
        (CopyRoute::PageableToDevice, _) => "h2d_pageable",
        (CopyRoute::PageableToHost, _) => "d2h_pageable",
        _ => return None,
    };
    let run = crate::cost::measured::newest_on(gpu.key)?;
    let row = crate::cost::measured::nearest_transfer(run, kind, bytes)?;
    let predicted = model::copy(gpu, route, row.bytes).seconds;
    Some(MeasuredCopy {
        bytes: row.bytes,
        duration: Duration::from_secs_f64(row.seconds),
        date: run.date.clone(),
        model_error: predicted / row.seconds - 1.0,
    })
}
