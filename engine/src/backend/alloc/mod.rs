//! The caching allocator's policy (PyTorch's rules, over any raw allocator) and raw host memory.
//! Addresses and sizes only: which device a block belongs to, and who holds it, is `memory`'s.

pub mod caching;
pub mod host;
