//! The CUDA backend for real GPUs: libraries loaded at run time (`libs`), kernels compiled by
//! NVRTC (`nvrtc`) and launched with typed parameters (`launch`, `ops`), cuBLAS (`blas`), timed
//! copies (`copy`), and each device's context, stream and raw memory (`runtime`). It works on
//! device pointers, host slices and layouts; the storage layer above allocates every buffer.

pub mod blas;
pub mod copy;
pub mod launch;
pub mod libs;
pub mod nvrtc;
pub(crate) mod ops;
pub mod runtime;
