//! Neural-network modules: the `Module` trait (forward, parameters, moving between devices and
//! dtypes, train/eval), `Sequential`, the layers and the losses.

mod card;
mod layers;
mod loss;

use std::time::{Duration, Instant};

pub use card::summary;
pub use layers::{Dropout, Flatten, LayerNorm, Linear, ReLU, Sigmoid, Tanh};
pub use loss::{CrossEntropyLoss, MSELoss, NLLLoss};

use crate::base::dtype::DType;
use crate::device::Device;
use crate::device::error::{Error, Result};
use crate::tensor::Tensor;
use crate::tensor::autograd::no_grad;

/// A layer or a model: a function of a tensor with learnable parameters.
///
/// A model made of layers implements `forward` and lists its layers in `children` and
/// `children_mut`; parameters, moving, `train`/`eval` and summaries then come for free:
///
/// ```
/// use placelab::nn::{Linear, Module};
/// use placelab::prelude::*;
///
/// struct SimpleNN { fc1: Linear, fc2: Linear }
///
/// impl Module for SimpleNN {
///     fn forward(&self, x: &Tensor) -> Result<Tensor> {
///         self.fc2.forward(&self.fc1.forward(x)?.relu()?)
///     }
///     fn children(&self) -> Vec<(String, &dyn Module)> {
///         vec![("fc1".into(), &self.fc1), ("fc2".into(), &self.fc2)]
///     }
///     fn children_mut(&mut self) -> Vec<(String, &mut dyn Module)> {
///         vec![("fc1".into(), &mut self.fc1), ("fc2".into(), &mut self.fc2)]
///     }
/// }
/// # fn main() -> Result<()> {
/// let model = SimpleNN { fc1: Linear::new(784, 128, Device::Cpu)?, fc2: Linear::new(128, 10, Device::Cpu)? };
/// assert_eq!(model.named_parameters()[2].0, "fc2.weight");
/// # Ok(()) }
/// ```
pub trait Module: Send + Sync {
    fn forward(&self, x: &Tensor) -> Result<Tensor>;

    /// The sub-modules with their names.
    fn children(&self) -> Vec<(String, &dyn Module)> {
        Vec::new()
    }

    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module)> {
        Vec::new()
    }

    /// This module's own parameters (not its children's), for layers that hold some.
    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    fn own_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        Vec::new()
    }

    /// Training mode (dropout active) or evaluation mode, for this module and its children.
    fn set_training(&mut self, training: bool) {
        for (_, c) in self.children_mut() {
            c.set_training(training);
        }
    }

    fn is_training(&self) -> bool {
        self.children().iter().all(|(_, c)| c.is_training())
    }

    /// A one-line description: `Linear(784 → 128)`; by default the type's name.
    fn describe(&self) -> String {
        let full = std::any::type_name::<Self>();
        full.rsplit("::").next().unwrap_or(full).to_string()
    }

    /// Every parameter with PyTorch's dotted names (`fc1.weight`, `0.bias`), in order.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut v = self.own_parameters();
        for (name, c) in self.children() {
            v.extend(
                c.named_parameters()
                    .into_iter()
                    .map(|(n, p)| (format!("{name}.{n}"), p)),
            );
        }
        v
    }

    /// Calls `f` on every parameter slot, so that it can be replaced (moved, cast, replicated).
    fn visit_parameters_mut(
        &mut self,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        for (n, p) in self.own_parameters_mut() {
            f(&n, p)?;
        }
        for (name, c) in self.children_mut() {
            c.visit_parameters_mut(&mut |n, p| f(&format!("{name}.{n}"), p))?;
        }
        Ok(())
    }
}

/// What `Module::to`/`to_dtype` did: how many parameters and bytes moved, and how long it took.
#[derive(Debug, Clone, PartialEq)]
pub struct MoveReport {
    pub tensors: usize,
    pub bytes: usize,
    pub duration: Duration,
    pub to: String,
}

impl std::fmt::Display for MoveReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "moved {} parameter tensor(s), {} to {} in {}",
            self.tensors,
            crate::base::units::human_bytes(self.bytes),
            self.to,
            crate::base::units::human_duration(self.duration)
        )
    }
}

/// Methods every module gets.
pub trait ModuleExt: Module {
    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, p)| p)
            .collect()
    }

    /// The number of learnable values.
    fn num_parameters(&self) -> usize {
        self.parameters().iter().map(Tensor::numel).sum()
    }

    /// Moves every parameter to `device` in place (PyTorch's `model.to(device)`), keeping them
    /// leaves that require grad. Returns what moved and how long it took.
    fn to(&mut self, device: &Device) -> Result<MoveReport> {
        device.check_available()?;
        self.replace_parameters(device.to_string(), &mut |p| {
            if p.device() == *device {
                Ok(None)
            } else {
                p.to(device).map(Some)
            }
        })
    }

    /// Converts every float parameter to `dtype` in place (`model.half()`, `model.to(torch.bfloat16)`).
    fn to_dtype(&mut self, dtype: DType) -> Result<MoveReport> {
        if !dtype.is_float() {
            return Err(Error::UnsupportedDType {
                op: "Module::to_dtype",
                dtype,
                hint: "Parameters must stay floats.".into(),
            });
        }
        self.replace_parameters(dtype.to_string(), &mut |p| {
            if p.dtype() == dtype {
                Ok(None)
            } else {
                p.to_dtype(dtype).map(Some)
            }
        })
    }

    #[doc(hidden)]
    fn replace_parameters(
        &mut self,
        to: String,
        f: &mut dyn FnMut(&Tensor) -> Result<Option<Tensor>>,
    ) -> Result<MoveReport> {
        let start = Instant::now();
        let (mut tensors, mut bytes) = (0, 0);
        self.visit_parameters_mut(&mut |_, p| {
            if let Some(new) = no_grad(|| f(p))? {
                tensors += 1;
                bytes += new.nbytes();
                *p = new.requires_grad_(true)?;
            }
            Ok(())
        })?;
        Ok(MoveReport {
            tensors,
            bytes,
            duration: start.elapsed(),
            to,
        })
    }

    fn train(&mut self) {
        self.set_training(true);
    }

    fn eval(&mut self) {
        self.set_training(false);
    }

    /// Clears every parameter's gradient.
    fn zero_grad(&self) {
        for p in self.parameters() {
            p.zero_grad();
        }
    }

    /// The devices the parameters live on, each once.
    fn devices(&self) -> Vec<Device> {
        let mut d: Vec<Device> = self.parameters().iter().map(Tensor::device).collect();
        d.sort();
        d.dedup();
        d
    }
}

impl<M: Module + ?Sized> ModuleExt for M {}

/// Modules applied one after another; parameters are named by position (`0.weight`).
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
    training: bool,
}

impl Default for Sequential {
    fn default() -> Self {
        Sequential::new()
    }
}

impl Sequential {
    pub fn new() -> Self {
        Sequential {
            layers: Vec::new(),
            training: true,
        }
    }

    /// Appends a layer (builder style): `Sequential::new().add(Linear::new(..)?).add(ReLU)`.
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, layer: impl Module + 'static) -> Self {
        self.layers.push(Box::new(layer));
        self
    }

    pub fn len(&self) -> usize {
        self.layers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

/// Names the parameter behind a device mismatch inside layer `i` (`weight` → `2.weight`).
fn locate(e: Error, i: usize) -> Error {
    match e {
        Error::DeviceMismatch {
            op,
            arg,
            arg_device,
            first_arg,
            first_device,
        } if first_arg == "input" => Error::DeviceMismatch {
            op,
            arg: format!("{i}.{arg}"),
            arg_device,
            first_arg,
            first_device,
        },
        other => other,
    }
}

impl Module for Sequential {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            h = layer.forward(&h).map_err(|e| locate(e, i))?;
        }
        Ok(h)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        self.layers
            .iter()
            .enumerate()
            .map(|(i, l)| (i.to_string(), l.as_ref()))
            .collect()
    }

    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module)> {
        self.layers
            .iter_mut()
            .enumerate()
            .map(|(i, l)| (i.to_string(), l.as_mut() as &mut dyn Module))
            .collect()
    }

    fn set_training(&mut self, training: bool) {
        self.training = training;
        for l in &mut self.layers {
            l.set_training(training);
        }
    }

    fn is_training(&self) -> bool {
        self.training
    }

    fn describe(&self) -> String {
        format!("Sequential({} layers)", self.layers.len())
    }
}
