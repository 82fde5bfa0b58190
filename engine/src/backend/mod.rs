//! The backends, on pointers, slices and layouts (never a `Storage` or a `Tensor`): the CPU
//! kernels (`cpu/`), the CUDA backend (`gpu/`: a real GPU or the emulator behind one `Driver`
//! enum) and the caching allocator's policy with host memory (`alloc/`).

pub(crate) mod alloc;
pub mod cpu;
pub mod gpu;
