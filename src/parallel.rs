//! `DataParallel`: one model, several GPUs. Each forward scatters the batch over the devices,
//! runs a replica of the module on each (its parameters copied there with a differentiable
//! `.to()`), and gathers the outputs on the first device; backward then sums every replica's
//! gradients into the original parameters — what `torch.nn.DataParallel` does.

use crate::nn::{Module, ModuleExt};
use crate::{Device, Error, Result, Tensor, cuda};

pub struct DataParallel {
    module: Box<dyn Module>,
    devices: Vec<Device>,
}

impl DataParallel {
    /// Wraps `module` for `devices` (every CUDA device when empty). The module's parameters must
    /// already be on the first device, which also receives the outputs.
    pub fn new(module: impl Module + 'static, devices: Vec<Device>) -> Result<DataParallel> {
        let devices = if devices.is_empty() {
            (0..cuda::device_count()).map(Device::Cuda).collect()
        } else {
            devices
        };
        let Some(&first) = devices.first() else {
            return Err(Error::DeviceUnavailable {
                device: Device::Cuda(0),
                reason: "DataParallel needs at least one CUDA device and there is none".into(),
            });
        };
        for d in &devices {
            if !d.is_cuda() {
                return Err(Error::invalid(
                    "DataParallel::new",
                    format!("{d} is not a CUDA device; DataParallel splits work over GPUs"),
                ));
            }
            d.check_available()?;
        }
        if let Some((name, p)) = module
            .named_parameters()
            .into_iter()
            .find(|(_, p)| p.device() != first)
        {
            return Err(Error::invalid(
                "DataParallel::new",
                format!(
                    "the module's parameters must be on {first} (the first device) but `{name}` is on {}; call `model.to(&{})?` first",
                    p.device(),
                    first.rust_expr()
                ),
            ));
        }
        Ok(DataParallel {
            module: Box::new(module),
            devices,
        })
    }

    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    pub fn module(&self) -> &dyn Module {
        self.module.as_ref()
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

impl Module for DataParallel {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let first = self.devices[0];
        if self.devices.len() == 1 || x.rank() == 0 {
            return self.module.forward(&x.to(&first)?);
        }
        let batch = x.shape()[0];
        let parts = self.devices.len().min(batch.max(1));
        let per = batch.div_ceil(parts).max(1);
        let mut outs = Vec::new();
        for (i, device) in self.devices.iter().take(parts).enumerate() {
            let start = i * per;
            if start >= batch {
                break;
            }
            let chunk = x.narrow(0, start, per.min(batch - start))?.to(device)?;
            let out = if *device == first {
                self.module.forward(&chunk)?
            } else {
                let replica = self.module.map_parameters(&mut |_, p| p.to(device))?;
                replica.forward(&chunk)?.to(&first)?
            };
            outs.push(out);
        }
        Tensor::cat(&outs.iter().collect::<Vec<_>>(), 0)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.module
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
            .visit_parameters_mut(&mut |n, p| f(&format!("module.{n}"), p))
    }

    fn map_parameters(
        &self,
        f: &mut dyn FnMut(&str, &Tensor) -> Result<Tensor>,
    ) -> Result<Box<dyn Module>> {
        self.module
            .map_parameters(&mut |n, p| f(&format!("module.{n}"), p))
    }

    fn set_training(&mut self, training: bool) {
        self.module.set_training(training);
    }

    fn is_training(&self) -> bool {
        self.module.is_training()
    }

    fn describe(&self) -> String {
        let d: Vec<String> = self.devices.iter().map(|d| d.to_string()).collect();
        format!(
            "DataParallel({}) of {} with {} parameters",
            d.join(", "),
            self.module.describe(),
            self.module.num_parameters()
        )
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("module".into(), self.module.as_ref())]
    }
}
