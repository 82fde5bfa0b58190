//! The seam between the CUDA backend and what runs it: the few driver services the backend
//! uses, as one trait. This is the checklist a new kind of CUDA device implements (candle's
//! `BackendDevice` is the model); the rest of `gpu/` (launch geometry, argument packing, the
//! kernels' views, GEMM operand mapping, timed and ordered copies) is shared by every kind.
//!
//! Two implementations: `cuda_driver` (a real GPU through cudarc's driver API, cuBLAS and
//! NVRTC) and `emulated` (host memory, the same `kernels/*.cu` compiled for the CPU, a worker
//! thread per device as its stream). Each device has one stream: everything queued on it runs in
//! order, and the host only waits where a method says so.

use std::any::Any;
use std::time::Duration;

pub use super::args::Arg;
use super::nvrtc::KernelSource;
use crate::dtype::DType;

/// A launch's geometry, as `cuLaunchKernel` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    pub blocks: (u32, u32, u32),
    pub threads: (u32, u32, u32),
    pub shared_bytes: u32,
}

/// Why device memory could not be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocFailure {
    /// The device is full (the caching allocator empties its cache and retries once).
    OutOfMemory,
    /// Any other driver failure, reported as it is.
    Failed(String),
}

/// A batched GEMM as cuBLAS takes it (column-major): `C[i] = op(A[i]) · op(B[i])` for `batch`
/// matrices, with `alpha = 1` and `beta = 0`, or `beta = 1` with `accumulate` (`C[i] += …`).
/// `trans_*`: the operand is read transposed.
#[derive(Debug, Clone, Copy)]
pub struct Gemm {
    pub dtype: DType,
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: u64,
    pub lda: usize,
    pub stride_a: i64,
    pub b: u64,
    pub ldb: usize,
    pub stride_b: i64,
    pub c: u64,
    pub ldc: usize,
    pub stride_c: i64,
    pub batch: usize,
    /// Add the product onto C (`beta = 1`) instead of overwriting it.
    pub accumulate: bool,
    /// f32 products may use TF32 tensor cores.
    pub allow_tf32: bool,
    /// 0, or the device address of `m` elements added to every column of C in the GEMM's
    /// epilogue (cuBLASLt's bias; `addmm`'s bias row, row-major): only with one matrix and
    /// without `accumulate`.
    pub bias: u64,
}

/// A point on a device's stream that the host (or another stream) can wait for, and that
/// timestamps when the stream reaches it.
pub trait DriverEvent: Send + Sync {
    /// Waits until the stream has reached the event.
    fn synchronize(&self) -> Result<(), String>;
    /// Whether the stream has reached the event, or the work before it failed (never waits;
    /// `synchronize` then reports the failure).
    fn is_complete(&self) -> bool;
    /// Waits until the stream reaches the event or `limit` has passed; whether it was reached
    /// (or failed). The host wakes as soon as it is: a real GPU's event is polled in a busy loop,
    /// as the CUDA runtime's default wait does; the emulator's stream wakes its waiter.
    fn wait_up_to(&self, limit: Duration) -> bool;
    /// Milliseconds from `start` to this event, both reached.
    fn elapsed_ms_since(&self, start: &dyn DriverEvent) -> Result<f32, String>;
    fn as_any(&self) -> &dyn Any;
}

/// What one CUDA device must provide. Errors are the driver's message; the caller names the
/// op and the device. Every `unsafe` method takes device addresses the caller vouches for:
/// live blocks of this device (or, for host slices, memory that stays valid as documented).
pub trait Driver: Send + Sync {
    /// The device's name (`NVIDIA H100 80GB HBM3`).
    fn name(&self) -> Result<String, String>;
    /// Compute capability, e.g. (9, 0).
    fn compute_capability(&self) -> (i32, i32);

    /// `bytes` of device memory.
    fn malloc(&self, bytes: usize) -> Result<u64, AllocFailure>;
    /// Returns a block from `malloc`, after the stream's queued work is done.
    ///
    /// # Safety
    /// `ptr` came from this driver's `malloc` and nothing uses it afterwards.
    unsafe fn free(&self, ptr: u64, bytes: usize);
    /// (free, total) bytes of the device.
    fn mem_info(&self) -> (usize, usize);

    /// Page-locked host memory that any device's copies may read and write asynchronously.
    fn malloc_host(&self, bytes: usize) -> Result<*mut u8, String>;
    /// # Safety
    /// `ptr` came from `malloc_host(bytes)` and no copy uses it.
    unsafe fn free_host(&self, ptr: *mut u8, bytes: usize);

    /// Queues a copy of `src` to `dst`. From pageable memory `src` is read before this returns;
    /// from `malloc_host` memory it is read later, in stream order.
    ///
    /// # Safety
    /// `dst` holds `src.len()` bytes; pinned `src` stays valid until the copy is done.
    unsafe fn copy_htod(&self, dst: u64, src: &[u8]) -> Result<(), String>;
    /// Queues a copy of `dst.len()` bytes at `src` into `dst`. Into pageable memory this returns
    /// once the bytes are there; into `malloc_host` memory they arrive later, in stream order.
    ///
    /// # Safety
    /// As `copy_htod`, the other way round.
    unsafe fn copy_dtoh(&self, dst: &mut [u8], src: u64) -> Result<(), String>;
    /// Queues, on this (the source's) stream, a copy of `bytes` from `src` here to `dst` on
    /// the device `to`.
    ///
    /// # Safety
    /// Both ranges are live blocks of their devices.
    unsafe fn copy_peer(
        &self,
        to: &dyn Driver,
        dst: u64,
        src: u64,
        bytes: usize,
    ) -> Result<(), String>;

    /// Lets this device's copies reach `to`'s memory directly (`cuCtxEnablePeerAccess`), where
    /// the hardware allows it; returns whether it does. Without it the driver stages a copy
    /// between the two through host memory. Called once per ordered pair, before the first copy.
    fn enable_peer_access(&self, to: &dyn Driver) -> Result<bool, String>;

    /// An event that can time (created with timing enabled).
    fn new_event(&self) -> Result<Box<dyn DriverEvent>, String>;
    /// Records `event` at the current end of this device's stream.
    fn record(&self, event: &dyn DriverEvent) -> Result<(), String>;
    /// Makes this device's stream wait (without blocking the host) until `event`, possibly of
    /// another device, is reached.
    fn wait_event(&self, event: &dyn DriverEvent) -> Result<(), String>;
    /// Waits until all work queued on the stream has finished.
    fn synchronize(&self) -> Result<(), String>;

    /// Queues kernel `name` of `source` with `args`; refuses arguments that do not match the
    /// kernel's parameters.
    ///
    /// # Safety
    /// Every pointer argument addresses live device memory holding what the kernel reads and
    /// writes there.
    unsafe fn launch(
        &self,
        source: &KernelSource,
        name: &str,
        grid: Grid,
        args: &[Arg],
    ) -> Result<(), String>;

    /// Queues a GEMM. `workspace` is device memory of `workspace_bytes` that the driver may use
    /// for as long as the device lives.
    ///
    /// # Safety
    /// The operands and the output are live device memory of the sizes the call implies.
    unsafe fn gemm(&self, call: &Gemm, workspace: (u64, usize)) -> Result<(), String>;

    fn as_any(&self) -> &dyn Any;
}
