//! placelab: a tensor engine with CPU and CUDA devices, built for seeing where tensors live.
//!
//! ```
//! use placelab::prelude::*;
//! # fn main() -> placelab::Result<()> {
//! let device = Device::cuda_if_available();
//! let x = Tensor::randn([2, 3], &Device::Cpu)?;
//! let y = x.to(&device)?;             // a copy; `x` stays on the CPU
//! assert_eq!(y.device(), device);
//! let z = (&y * 2.0)?.sum_all()?;
//! println!("{z}");
//! # Ok(()) }
//! ```

// The engine's layers, lowest first, one folder each: a module imports only the layers above it
// in this list (`.ci/layers.py` checks it; ARCHITECTURE.md draws it). The folders are private;
// the `pub use` lines below keep the paths users know (`placelab::DType`, `placelab::gpu`, …),
// each public item at one path (the prelude aside).
// 0. leaves: units, the cache folder, dtypes, the op enums; what named GPUs would take
mod base;
pub mod cost;
// 1. devices: the `Device` value and its kind, errors, layouts, the interrupt flag, the registry
mod device;
// 2. backends, on pointers, slices and layouts: the CPU kernels, the CUDA backend, the caching
//    allocator's policy and host memory; beside them, where a piece of code's time and memory go
mod backend;
pub mod profile;
// 3.-5. per-device memory and its ledger; storage (the only place that matches on the backend);
//    transfers (the record, the log, copies still in flight)
pub mod memory;
mod storage;
pub mod transfer;
// 6. tensors and autograd
mod tensor;
// 7. what is built from tensors for training
mod train;
// 8. everything the engine draws; the `torch.cuda` facade; what runs inside a REPL cell's process
mod cell;
pub mod cuda;
pub mod display;
// The REPL and the Jupyter kernel are a crate of their own (the repository's src/), over this one.

pub use backend::{cpu, gpu};
pub use base::{op, units};
pub use cell::streams as cell_io;
pub use cell::{exercise, probe, show};
pub use device::interrupt;
pub use tensor::autograd;
pub use train::{amp, data, nn, optim, parallel};

pub use base::dtype::{DType, Element, Scalar};
pub use device::{Device, DeviceKind, default_device, device_label, set_default_device};
// One path for the error type: here (and in the prelude).
pub use device::error::{Error, Reported, Result};
pub use device::layout::{Dim, Dims, IntoShape};
pub use tensor::{IntoOptions, Tensor, TensorData, TensorOptions, manual_seed};

pub use base::cache::cache_dir;

/// Everything a REPL cell or a script needs: `use placelab::prelude::*;`.
pub mod prelude {
    pub use crate::amp::{GradScaler, autocast};
    pub use crate::autograd::no_grad;
    pub use crate::data::DataLoader;
    pub use crate::exercise;
    pub use crate::memory::{self, caching::MemoryStats};
    pub use crate::nn::{self, Module, ModuleExt};
    pub use crate::op::Op;
    pub use crate::optim::{self, Adam, Optimizer, Sgd};
    pub use crate::parallel::DataParallel;
    pub use crate::profile::{Profile, profile};
    /// In scope (unnamed) so a cell's last `Debug` value shows without a second compile.
    pub use crate::show::ShowDebug as _;
    pub use crate::transfer::{self, Transfer};
    pub use crate::{
        DType, Device, DeviceKind, Error, Result, Scalar, Tensor, cuda, default_device,
        manual_seed, set_default_device, tensor,
    };
}
