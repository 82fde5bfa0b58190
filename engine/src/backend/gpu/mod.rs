//! The CUDA backend: kernels compiled by NVRTC (`nvrtc`) and launched with typed parameters
//! (`launch`, `ops`, `reduce`, `optim`, on views as `strided` builds them), GEMMs (`blas`, with a bias through `blas_lt`), checks kernels make as they run (`checks`), timed copies (`copy`) and cached pinned host memory (`pinned`), and each device's driver, stream
//! and raw memory (`runtime`). What runs it is behind one seam (`driver`): a real GPU through
//! cudarc (`cuda_driver`, with libraries found by `libs`), or the emulator (`emulated`), which
//! runs the same `kernels/*.cu` compiled for the CPU. It works on device pointers, host slices
//! and layouts; the storage layer above allocates every buffer.

pub(crate) mod args;
pub mod blas;
pub(crate) mod blas_lt;
pub(crate) mod call;
pub(crate) mod checks;
pub mod copy;
pub(crate) mod cuda_driver;
pub mod driver;
pub mod emulated;
pub mod launch;
pub mod libs;
pub mod nvrtc;
pub(crate) mod ops;
pub(crate) mod optim;
pub mod pinned;
pub(crate) mod random;
pub(crate) mod reduce;
pub mod runtime;
pub(crate) mod strided;
pub(crate) mod tensor_list;
