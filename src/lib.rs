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

pub mod amp;
pub mod autograd;
pub mod cell_io;
pub mod cpu;
pub mod cuda;
pub mod device;
pub mod display;
pub mod dtype;
pub mod error;
#[cfg(feature = "frontend")]
pub mod frontend;
mod inflight;
pub mod interrupt;
pub mod layout;
pub mod memory;
pub mod nn;
pub mod optim;
pub mod parallel;
pub mod probe;
mod storage;
pub mod tensor;
pub mod transfer;

pub use device::{Device, default_device, set_default_device};
pub use dtype::{DType, Element, Scalar};
pub use error::{Error, Result};
pub use layout::{Dim, Dims, IntoShape};
pub use tensor::{IntoOptions, Tensor, TensorData, TensorOptions, manual_seed};
pub use transfer::{Clock, CopyMode, HostMemoryKind, Transfer};

/// `~/.cache/placelab` (or `$PLACELAB_CACHE`): compiled CUDA kernels, and the front end's
/// compile directories and evcxr config.
pub fn cache_dir() -> std::path::PathBuf {
    if let Some(d) = std::env::var_os("PLACELAB_CACHE") {
        return d.into();
    }
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    home.join(".cache").join("placelab")
}

/// The threads the CPU kernels use.
pub fn cpu_threads() -> usize {
    rayon::current_num_threads()
}

/// Everything a REPL cell or a script needs: `use placelab::prelude::*;`.
pub mod prelude {
    pub use crate::amp::{GradScaler, autocast};
    pub use crate::autograd::no_grad;
    pub use crate::memory::{self, MemoryStats};
    pub use crate::nn::{self, Module, ModuleExt};
    pub use crate::optim::{self, Adam, Optimizer, Sgd};
    pub use crate::parallel::DataParallel;
    pub use crate::transfer::{self, Transfer};
    pub use crate::{
        DType, Device, Error, Result, Scalar, Tensor, cuda, default_device, manual_seed,
        set_default_device, tensor,
    };
}
