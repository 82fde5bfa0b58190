//! The leaves every layer may use: byte and time units, the cache folder, dtypes and the op enums
//! the backends run. Nothing here names another part of the engine.

pub(crate) mod cache;
pub mod dtype;
pub mod op;
pub mod units;
