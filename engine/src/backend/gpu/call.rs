//! What a driver call takes beyond addresses (a launch's `Grid`, a `Gemm` as cuBLAS takes it) and
//! how one fails (`DriverError`): shared by `driver.rs`'s enum and each kind behind it.

use crate::base::dtype::DType;

/// A launch's geometry, as `cuLaunchKernel` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    pub blocks: (u32, u32, u32),
    pub threads: (u32, u32, u32),
    pub shared_bytes: u32,
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

/// Why a driver call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverError {
    /// The device has no room for the block (the caching allocator empties its cache and
    /// retries once, then reports the device's free and total bytes).
    OutOfMemory,
    /// CUDA's driver, cuBLAS(Lt) or NVRTC failed or refused the call, in its words.
    Cuda(String),
    /// The emulator failed or refused the call (a kernel `kernels/*.cu` lacks, arguments that do
    /// not match it, queued work that failed), in its words.
    Emulator(String),
    /// A copy, peer access or event between a real GPU and an emulated one (`what` names it).
    MixedKinds(&'static str),
    /// An event's time was read before the stream reached it.
    EventNotReached,
    /// A stream number the device never made (a stream of the device as it was before a
    /// change of the stand-ins made it another).
    NoSuchStream(u32),
}

impl std::fmt::Display for DriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DriverError::OutOfMemory => f.write_str("out of memory"),
            DriverError::Cuda(why) | DriverError::Emulator(why) => f.write_str(why),
            DriverError::MixedKinds(what) => {
                write!(f, "{what} between a real GPU and an emulated one")
            }
            DriverError::EventNotReached => f.write_str("the stream has not reached the event yet"),
            DriverError::NoSuchStream(id) => write!(
                f,
                "the device has no stream {id}: it was made by the device before a change of the stand-ins (cuda::simulate or cuda::emulate); make the stream again"
            ),
        }
    }
}

impl std::error::Error for DriverError {}

pub(crate) type DriverResult<T> = Result<T, DriverError>;
