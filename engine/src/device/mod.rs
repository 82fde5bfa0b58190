//! Devices: the `Device` value (`value.rs`), what backs it (`kind.rs`: one `DeviceKind`), the
//! one `Error` every layer returns (`error.rs`, which names devices), shapes and strides
//! (`layout.rs`), the SIGINT flag every wait checks (`interrupt.rs`), reading a device from text
//! (`parse.rs`), the stream each thread queues a device's work on (`current_stream.rs`), the registry of what exists in this process (`registry.rs`: real GPUs probed
//! without panicking, or stand-ins), the panic guard around cudarc's loader (`guard.rs`), the CUDA major
//! this build is for (`cuda_major.rs`), and the default device.

pub mod cuda_major;
pub(crate) mod current_stream;
mod default;
pub mod error;
pub(crate) mod guard;
pub mod interrupt;
mod kind;
pub mod layout;
mod parse;
pub(crate) mod per_device;
pub(crate) mod registry;
mod value;

pub use default::{default_device, set_default_device};
pub use kind::{DeviceKind, device_label};
pub use value::Device;
