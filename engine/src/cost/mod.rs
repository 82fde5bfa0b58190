//! Predicted GPU costs: a table of named GPUs with their public figures (`gpus.rs`), a small
//! model over it (`model.rs`) whose constants are fitted (`fit.rs`) on placelab's own runs on
//! real GPUs (`measured.rs`, `rows.rs`). A simulated device standing for a named GPU
//! (`--as h100`) shows these beside the host copies it measures; a real GPU's measurements
//! stand alone.

pub mod fit;
pub(crate) mod gpus;
pub mod measured;
pub(crate) mod model;
pub mod rows;

// The table and the model, each item at one path: `cost::find`, `cost::copy`, `cost::FITTED`.
pub use gpus::{GPUS, GpuSpec, Pcie, find, for_device_name, names, unknown};
pub use model::{
    Access, Arithmetic, Bound, Constants, CopyPrediction, CopyRoute, DEVICE_COPY_EFFICIENCY,
    FITTED, NVLINK_EFFICIENCY, StepPrediction, copy, copy_with, kernel, kernel_with, matmul,
    matmul_with, queued, queued_with, step, step_with,
};
