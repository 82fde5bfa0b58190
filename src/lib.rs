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

// The engine's layers, lowest first: each module imports only those above it in this list
// (`tensor` and `autograd` use each other). `.ci/layers.py` checks it; ARCHITECTURE.md draws it.
// 0. leaves
mod cache;
pub mod dtype;
pub mod exercise;
pub(crate) mod html;
pub mod op;
pub mod units;
// what named GPUs would take (a table and a model over it; predicted costs)
pub mod cost;
// 1. devices and errors (the `Device` value, `error`, then the registry of what exists)
pub mod device;
pub mod error;
pub mod interrupt;
pub mod layout;
// 2. backends, on pointers, slices and layouts: the CPU kernels, the CUDA backend, the caching
//    allocator's policy and host memory
mod alloc;
pub mod cpu;
pub mod gpu;
// where a piece of code's time and memory go (what the layers below report while it records)
pub mod profile;
// 3. per-device memory and its ledger
pub mod memory;
// 4. storage: the only place that matches on the backend
mod storage;
// 5. transfers: the record, the log, copies still in flight
pub mod transfer;
// 6. tensors and autograd
pub mod autograd;
pub mod tensor;
// 7. what is built from tensors
pub mod amp;
pub mod data;
pub mod nn;
pub mod optim;
pub mod parallel;
// 8. the `torch.cuda` facade, cards, and what runs inside a REPL cell's process
pub mod cell_io;
pub mod cuda;
pub mod display;
pub mod probe;
pub mod show;
// 9. the REPL and the Jupyter kernel
#[cfg(feature = "frontend")]
pub mod frontend;

pub use device::{Device, DeviceKind, default_device, set_default_device};
pub use dtype::{DType, Element, Scalar};
pub use error::{Error, Result};
pub use layout::{Dim, Dims, IntoShape};
pub use tensor::{IntoOptions, Tensor, TensorData, TensorOptions, manual_seed};
pub use transfer::{Clock, CopyMode, HostMemoryKind, PeerCopy, Transfer};

pub use cache::cache_dir;
/// The threads the CPU kernels use.
pub use cpu::threads as cpu_threads;

/// Everything a REPL cell or a script needs: `use placelab::prelude::*;`.
pub mod prelude {
    pub use crate::amp::{GradScaler, autocast};
    pub use crate::autograd::no_grad;
    pub use crate::data::DataLoader;
    pub use crate::exercise;
    pub use crate::memory::{self, MemoryStats};
    pub use crate::nn::{self, Module, ModuleExt};
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
