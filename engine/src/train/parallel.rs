//! `DataParallel`: one model, several GPUs. Each forward scatters the batch over the devices,
//! runs a replica of the module on each (its parameters copied there with a differentiable
//! `.to()`), and gathers the outputs on the first device; backward then sums every replica's
//! gradients into the original parameters — what `torch.nn.DataParallel` does.

use std::sync::Mutex;

use crate::device::Device;
use crate::device::error::{Error, Result};
use crate::device::registry::device_count;
use crate::tensor::{Tensor, expect_device};
use crate::train::nn::{Module, ModuleExt};

pub struct DataParallel {
    /// Behind a lock: a forward swaps each replica's parameters in, then the originals back.
    module: Mutex<Box<dyn Module>>,
    devices: Vec<Device>,
}

impl DataParallel {
    /// Wraps `module` for `devices` (every CUDA device when empty). Before the first forward,
    /// move it to the first device (`dp.to(&Device::Cuda(0))?`); outputs are gathered there.
    pub fn new(module: impl Module + 'static, devices: Vec<Device>) -> Result<DataParallel> {
        let devices = if devices.is_empty() {
            (0..device_count()).map(Device::Cuda).collect()
        } else {
            devices
        };
        if devices.is_empty() {
            return Err(Error::DeviceUnavailable {
                device: Device::Cuda(0),
                reason: "DataParallel needs at least one CUDA device and there is none".into(),
            });
        }
        for d in &devices {
            if !d.is_cuda() {
                return Err(Error::invalid(
                    "DataParallel::new",
                    format!("{d} is not a CUDA device; DataParallel splits work over GPUs"),
                ));
            }
            d.check_available()?;
        }
        Ok(DataParallel {
            module: Mutex::new(Box::new(module)),
            devices,
        })
    }

    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Box<dyn Module>> {
        self.module.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why this wrapper does nothing, when it does nothing.
    pub fn note(&self) -> Option<String> {
        (self.devices.len() == 1).then(|| {
            format!(
                "DataParallel over one device does nothing: the module runs on {} as it would without it. Give it several devices (or set PLACELAB_SIMULATE_CUDA=2 to try it).",
                self.devices[0]
            )
        })
    }
}

/// Runs `module` on `x` with every parameter replaced by a differentiable copy on `device`,
/// then puts the originals back. Gradients reach the originals through the copies.
fn run_replica(module: &mut Box<dyn Module>, device: &Device, x: &Tensor) -> Result<Tensor> {
    let mut originals = Vec::new();
    let swapped = module.visit_parameters_mut(&mut |_, p| {
        let copy = p.to(device)?;
        originals.push(std::mem::replace(p, copy));
        Ok(())
    });
    let out = swapped.and_then(|_| module.forward(x));
    let mut it = originals.into_iter();
    module.visit_parameters_mut(&mut |_, p| {
        if let Some(o) = it.next() {
            *p = o;
        }
        Ok(())
    })?;
    out
}

impl Module for DataParallel {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let first = self.devices[0];
        let mut module = self.lock();
        // The module's parameters must be on the first device (`model.to(&first)?`).
        let params = module.named_parameters();
        let named: Vec<(&str, &Tensor)> = params.iter().map(|(n, p)| (n.as_str(), p)).collect();
        expect_device("DataParallel", ("the first device", first), &named)?;
        if self.devices.len() == 1 || x.rank() == 0 {
            return module.forward(&x.to(&first)?);
        }
        let batch = x.shape()[0];
        let per = batch.div_ceil(self.devices.len()).max(1);
        let mut outs = Vec::new();
        for (i, device) in self.devices.iter().enumerate() {
            let start = i * per;
            if start >= batch {
                break;
            }
            let chunk = x.narrow(0, start, per.min(batch - start))?.to(device)?;
            let out = if *device == first {
                module.forward(&chunk)?
            } else {
                run_replica(&mut module, device, &chunk)?.to(&first)?
            };
            outs.push(out);
        }
        Tensor::cat(&outs.iter().collect::<Vec<_>>(), 0)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.lock()
            .named_parameters()
            .into_iter()
            .map(|(n, p)| (format!("module.{n}"), p))
            .collect()
    }

    fn visit_parameters_mut(
        &mut self,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        self.module
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .visit_parameters_mut(&mut |n, p| f(&format!("module.{n}"), p))
    }

    fn set_training(&mut self, training: bool) {
        self.module
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .set_training(training);
    }

    fn is_training(&self) -> bool {
        self.lock().is_training()
    }

    fn describe(&self) -> String {
        let d: Vec<String> = self.devices.iter().map(|d| d.to_string()).collect();
        let m = self.lock();
        format!(
            "DataParallel({}) of {} with {} parameters",
            d.join(", "),
            m.describe(),
            m.num_parameters()
        )
    }
}
