//! Predicted GPU costs: a table of named GPUs with their public figures (`gpus.rs`) and a small
//! model over it (`model.rs`). A simulated device standing for a named GPU (`--as h100`) shows
//! these beside the host copies it measures; a real GPU's measurements stand alone.

pub mod gpus;
pub mod model;

pub use gpus::{GPUS, GpuSpec, Pcie, find, names, unknown};
pub use model::{Arithmetic, CopyPrediction, CopyRoute};
