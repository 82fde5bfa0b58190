//! What this process can use, as `:devices`, `placelab devices` and the REPL's banner list it:
//! each device with its name (a real GPU's from its driver, a stand-in's from its kind), and on a
//! real GPU the driver's and NVRTC's versions.

use super::{device_count, driver_version, real_device_count, unavailable_reason};
use crate::backend::gpu::{nvrtc, runtime};
use crate::device::error::Result;
use crate::device::guard::guarded;
use crate::device::registry::no_real_gpu_reason;
use crate::device::{Device, DeviceKind};
use crate::memory;

/// A human name for `cuda:index`.
pub fn device_name(index: usize) -> Result<String> {
    let size = crate::base::units::human_bytes;
    Ok(match Device::Cuda(index).kind()? {
        DeviceKind::SimulatedGpu {
            capacity,
            stands_for: Some(gpu),
        } => format!(
            "standing for {} (its costs predicted), on host memory, {}",
            gpu.with_article(),
            size(capacity)
        ),
        DeviceKind::SimulatedGpu {
            capacity,
            stands_for: None,
        } => format!("on host memory, {}", size(capacity)),
        DeviceKind::EmulatedGpu { capacity } => {
            format!("kernels/*.cu on the CPU, host memory, {}", size(capacity))
        }
        DeviceKind::Gpu => {
            let name = guarded("naming the GPU", || {
                runtime::gpu(index).and_then(|g| g.driver.name().map_err(|e| g.err("name", e)))
            });
            match name {
                Ok(Ok(n)) => n,
                _ => "NVIDIA GPU".into(),
            }
        }
        DeviceKind::Cpu => unreachable!("a CUDA index names no CPU"),
    })
}

/// `CUDA driver 12.8 · engine for CUDA 12 · NVRTC 12.8` for `:devices`; `None` where the devices are simulated or
/// there is no real GPU.
pub fn versions_line() -> Option<String> {
    match Device::Cuda(0).kind() {
        Ok(DeviceKind::Gpu) => {}
        Ok(DeviceKind::Cpu | DeviceKind::EmulatedGpu { .. } | DeviceKind::SimulatedGpu { .. })
        | Err(_) => return None,
    }
    let (major, minor) = driver_version()?;
    let nvrtc = match nvrtc::version() {
        Ok((a, b)) => format!("NVRTC {a}.{b}"),
        Err(why) => format!("NVRTC unavailable: {why}"),
    };
    Some(format!(
        "CUDA driver {major}.{minor} · engine for CUDA {} · {nvrtc}",
        crate::device::cuda_major::CUDA_MAJOR
    ))
}

/// What this process can use, as `:devices`, `placelab devices` and the REPL's banner list it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DeviceList {
    /// `cpu (2 threads)`, then `cuda:0 NVIDIA H100 80GB HBM3 (79.1 GiB free)` or
    /// `cuda:0 (simulated) …` for each CUDA device.
    pub devices: Vec<String>,
    /// The driver's and NVRTC's versions, on a real GPU (`versions_line`).
    pub versions: Option<String>,
    /// Why there is no CUDA device, when there is none.
    pub missing: Option<String>,
    /// Real CUDA devices on this machine, simulated or not.
    pub real: usize,
    /// Emulated CUDA devices this process uses now (`PLACELAB_EMULATE_CUDA`, `cuda::emulate`).
    pub emulated: usize,
    /// Why this machine has no real CUDA device, when it has none.
    pub no_real_gpu: Option<String>,
}

impl DeviceList {
    /// One line each: the devices, the versions, why there is no CUDA device.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = self.devices.clone();
        lines.extend(self.versions.clone());
        lines.extend(
            self.missing
                .iter()
                .map(|why| format!("no CUDA device: {why}")),
        );
        lines
    }
}

/// The devices this process can use now (after any `simulate`). `with_free` asks the driver for
/// each real GPU's free memory, which creates a CUDA context on it: the cell process, which will
/// hold one anyway, or a one-shot command.
pub fn devices(with_free: bool) -> DeviceList {
    DeviceList {
        versions: versions_line(),
        ..devices_without_versions(with_free)
    }
}

/// `devices` without the libraries' versions: what a process lists that must not load NVRTC (the
/// front end, whose engine may be of another CUDA major than its sessions').
pub fn devices_without_versions(with_free: bool) -> DeviceList {
    let mut devices = vec![format!("cpu ({} threads)", crate::backend::cpu::threads())];
    for i in 0..device_count() {
        let device = Device::Cuda(i);
        let name = device_name(i).unwrap_or_else(|e| e.to_string());
        // A stand-in device's name already gives its capacity; only a real GPU is asked.
        let ask = match device.kind() {
            Ok(DeviceKind::Gpu) => with_free,
            Ok(
                DeviceKind::Cpu | DeviceKind::EmulatedGpu { .. } | DeviceKind::SimulatedGpu { .. },
            )
            | Err(_) => false,
        };
        let free = match ask {
            true => memory::mem_get_info(&device)
                .map(|(f, _)| format!(" ({} free)", crate::base::units::human_bytes(f)))
                .unwrap_or_default(),
            false => String::new(),
        };
        devices.push(format!("{} {name}{free}", device.label()));
    }
    DeviceList {
        devices,
        versions: None,
        missing: unavailable_reason(),
        real: real_device_count(),
        emulated: (0..device_count())
            .filter(|&i| matches!(Device::Cuda(i).kind(), Ok(DeviceKind::EmulatedGpu { .. })))
            .count(),
        no_real_gpu: no_real_gpu_reason(),
    }
}
