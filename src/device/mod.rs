//! Devices: the `Device` value (`value.rs`), what backs it (`kind.rs`: one `DeviceKind`), reading one from text (`parse.rs`), the registry of
//! what exists in this process (`registry.rs`: real GPUs probed without panicking, or simulated
//! ones), the panic guard around cudarc's loader (`guard.rs`), and the default device.

mod default;
pub(crate) mod guard;
mod kind;
mod parse;
pub(crate) mod registry;
mod value;

pub use default::{default_device, set_default_device};
pub use kind::{DeviceKind, device_label};
pub use value::Device;
