//! Predicted GPU costs: a table of named GPUs with their public figures (`gpus.rs`), a small
//! model over it (`model.rs`) whose constants are fitted (`fit.rs`) on placelab's own runs on
//! real GPUs (`measured.rs`, `rows.rs`). A simulated device standing for a named GPU
//! (`--as h100`) shows these beside the host copies it measures; a real GPU's measurements
//! stand alone.

pub mod fit;
pub mod gpus;
pub mod measured;
pub mod model;
pub mod rows;

pub use gpus::{GPUS, GpuSpec, Pcie, find, names, unknown};
pub use model::{Access, Arithmetic, Bound, CopyPrediction, CopyRoute, StepPrediction};
