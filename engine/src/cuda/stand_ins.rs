//! Changing the stand-in devices (`cuda::simulate`, `simulate_as`, `emulate`): refused while a
//! tensor lives on a device that would disappear or change, or while the process has used a
//! real GPU; then the registry's setting changes, and the drivers and memory of the devices
//! that changed are let go (the rest keep theirs: a stream may still hold queued work).

use crate::backend::gpu::runtime;
use crate::device::error::{Error, Result};
use crate::device::registry::Simulation;
use crate::device::{Device, DeviceKind};
use crate::memory;

/// `count` stand-ins, each `each` (none when 0).
pub(super) fn stand_ins(count: usize, each: DeviceKind) -> Option<Simulation> {
    (count > 0).then_some(Simulation { count, each })
}

pub(super) fn replace_stand_ins(op: &'static str, new: Option<Simulation>) -> Result<()> {
    crate::device::registry::replace_simulation(new, |old| {
        if old.is_none() && new.is_some() {
            // Real GPUs in use: their tensors would be mistaken for a simulated device's.
            for d in memory::used_devices().into_iter().filter(|d| d.is_cuda()) {
                let live = memory::live_storages_if_used(&d);
                let tensors = live.iter().filter(|l| l.is_tensor()).count();
                if tensors > 0 {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "{tensors} tensor storage(s) live on the real GPU {d}; a process never mixes real and stand-in CUDA devices. Move them to the CPU (`.cpu()?`) and drop the GPU copies first"
                        ),
                    ));
                }
                if let Some(what) = live.iter().find_map(|l| l.engine_buffer) {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "this process has used the real GPU {d}, which still holds the engine's {what}; a process never mixes real and stand-in CUDA devices. Start a new session with PLACELAB_SIMULATE_CUDA (or PLACELAB_EMULATE_CUDA) set to stand devices in"
                        ),
                    ));
                }
            }
        }
        if let Some(old) = old {
            for i in 0..old.count {
                let d = Device::Cuda(i);
                if !keeps(old, new, i) {
                    // The engine's own buffers (cuBLAS's workspace) go with the device.
                    let live = memory::live_storages_if_used(&d)
                        .iter()
                        .filter(|l| l.is_tensor())
                        .count();
                    if live > 0 {
                        let word = old.each.label_word().unwrap_or("stand-in");
                        return Err(Error::invalid(
                            op,
                            format!(
                                "{live} tensor storage(s) still live on {}; drop them before changing the {word} devices",
                                crate::device::device_label(d, old.each),
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    })?;
    // A device that stays as it was keeps its driver (its stream may still hold queued work)
    // and its memory.
    runtime::forget_stale();
    memory::forget_simulated_devices();
    Ok(())
}

/// Whether stand-in `cuda:i` stays the same device when `old` becomes `new`.
fn keeps(old: Simulation, new: Option<Simulation>, i: usize) -> bool {
    new.is_some_and(|n| i < n.count && n.each == old.each)
}
