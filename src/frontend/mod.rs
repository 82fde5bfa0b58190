//! The front end: one evcxr `Session` with the engine preloaded, and the thin shells over it
//! (the terminal REPL and the script runner).

pub mod magics;
pub mod plot;
pub mod probe_client;
pub mod progress;
pub mod render;
pub mod repl;
pub mod script;
pub mod session;
pub mod setup;
