//! Matrix multiplication on a real GPU through cuBLAS: f32 (TF32 tensor cores only when
//! `set_allow_tf32(true)`, PyTorch's default being off), f64, and f16/bf16 through `cublasGemmEx`
//! with f32 accumulation. Like PyTorch, the first GEMM on a device takes a cuBLAS workspace from
//! the caching allocator, so it shows in `memory_allocated` from then on.

use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::cublas::{CudaBlas, result, sys};

use super::runtime::Gpu;
use crate::device::guard::guarded;
use crate::{DType, Error, Result};

/// Memory for cuBLAS's workspace, asked of the caller at a device's first GEMM: the device
/// address of `bytes` bytes, and what keeps them allocated for as long as the handle lives.
pub(crate) type WorkspaceSource<'a> = &'a dyn Fn(usize) -> Result<(u64, Box<dyn Send>)>;

/// One operand of a batched GEMM: a device pointer, each batch's matrix offset (in elements) and
/// the (row, column) strides.
pub(crate) type Operand<'a> = (u64, &'a [usize], (usize, usize));

static ALLOW_TF32: AtomicBool = AtomicBool::new(false);

/// Lets f32 matmuls use TF32 tensor cores (`torch.backends.cuda.matmul.allow_tf32`): much
/// faster on Ampere and later, with about 1e-3 relative error instead of f32's ~1e-6.
pub fn set_allow_tf32(allow: bool) {
    ALLOW_TF32.store(allow, Ordering::Relaxed);
}

pub fn allow_tf32() -> bool {
    ALLOW_TF32.load(Ordering::Relaxed)
}

/// PyTorch's cuBLAS workspace size (`CublasHandlePool.cpp`): 32 MiB from Hopper on, else
/// 4096 KiB × 2 + 16 KiB × 8.
pub fn workspace_bytes(cc_major: i32) -> usize {
    if cc_major >= 9 {
        32 << 20
    } else {
        4096 * 1024 * 2 + 16 * 1024 * 8
    }
}

/// Whether cuBLAS can read a row-major `rows × cols` matrix with strides `(rs, cs)` in place
/// (else the caller makes it contiguous first).
pub(crate) fn reads_in_place(rows: usize, cols: usize, rs: usize, cs: usize) -> bool {
    operand(rows, cols, rs, cs).is_some()
}

/// One operand of a GEMM as cuBLAS (column-major) sees a row-major `rows × cols` matrix with
/// strides `(rs, cs)`: its transpose is what cuBLAS reads, with no copy when either stride is 1.
fn operand(
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
) -> Option<(sys::cublasOperation_t, usize)> {
    // Strides of size-1 dims are arbitrary; give them the value that makes the check pass.
    let rs = if rows <= 1 { cols.max(1) } else { rs };
    let cs = if cols <= 1 { 1 } else { cs };
    if cs == 1 && rs >= cols.max(1) {
        Some((sys::cublasOperation_t::CUBLAS_OP_N, rs))
    } else if rs == 1 && cs >= rows.max(1) {
        Some((sys::cublasOperation_t::CUBLAS_OP_T, cs))
    } else {
        None
    }
}

/// Whether cuBLAS multiplies matrices of `dtype` (floats only; an error that says what to do).
pub(crate) fn check_dtype(dtype: DType) -> Result<()> {
    types(dtype).map(|_| ())
}

fn types(dtype: DType) -> Result<(sys::cudaDataType, sys::cublasComputeType_t)> {
    use sys::cublasComputeType_t as C;
    use sys::cudaDataType as D;
    Ok(match dtype {
        DType::F32 if allow_tf32() => (D::CUDA_R_32F, C::CUBLAS_COMPUTE_32F_FAST_TF32),
        DType::F32 => (D::CUDA_R_32F, C::CUBLAS_COMPUTE_32F),
        DType::F64 => (D::CUDA_R_64F, C::CUBLAS_COMPUTE_64F),
        DType::F16 => (D::CUDA_R_16F, C::CUBLAS_COMPUTE_32F),
        DType::BF16 => (D::CUDA_R_16BF, C::CUBLAS_COMPUTE_32F),
        d => {
            return Err(Error::UnsupportedDType {
                op: "matmul",
                dtype: d,
                hint: "matmul on a CUDA device takes float dtypes only (cuBLAS has no integer GEMM, and PyTorch's CUDA matmul refuses integers too); convert first, e.g. `x.to_dtype(DType::F32)?`, or multiply on the CPU.".into(),
            });
        }
    })
}

fn blas_error(g: &Gpu, e: impl std::fmt::Display) -> Error {
    Error::Cuda {
        op: "matmul",
        device: g.device(),
        msg: format!("cuBLAS: {e}"),
    }
}

/// Runs `f` with the device's cuBLAS handle, creating it and its workspace on first use.
fn with_handle<R>(
    g: &Gpu,
    workspace: WorkspaceSource,
    f: impl FnOnce(sys::cublasHandle_t) -> Result<R>,
) -> Result<R> {
    let mut slot = g.blas.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_none() {
        let blas = guarded("loading cuBLAS", || CudaBlas::new(g.stream.clone()))
            .map_err(|m| blas_error(g, m))?
            .map_err(|e| blas_error(g, e))?;
        let bytes = workspace_bytes(g.cc.0);
        let (ptr, ws) = workspace(bytes)?;
        let status = unsafe { sys::cublasSetWorkspace_v2(*blas.handle(), ptr as *mut _, bytes) };
        if status != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(blas_error(g, format!("{status:?}")));
        }
        *slot = Some((blas, ws));
    }
    let handle = *slot.as_ref().expect("created above").0.handle();
    g.bind()?;
    f(handle)
}

/// `a · b` for each batch into the contiguous `batch × m × n` buffer at `out`; the batch count
/// is `a`'s number of offsets.
pub(crate) fn matmul(
    g: &Gpu,
    dtype: DType,
    (pa, a_off, (a_rs, a_cs)): Operand,
    (pb, b_off, (b_rs, b_cs)): Operand,
    (m, n, k): (usize, usize, usize),
    out: u64,
    workspace: WorkspaceSource,
) -> Result<()> {
    let (data_type, compute) = types(dtype)?;
    let batches = a_off.len();
    if batches == 0 || m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        return super::ops::fill(g, dtype, out, batches * m * n, crate::Scalar::Int(0));
    }
    let (Some((op_a, lda)), Some((op_b, ldb))) =
        (operand(m, k, a_rs, a_cs), operand(k, n, b_rs, b_cs))
    else {
        // Neither stride is 1 (a strided view of a view): the tensor layer hands such operands
        // over contiguous, so this is a bug, not a user mistake.
        return Err(Error::invalid(
            "matmul",
            "an operand has no unit stride; call `.contiguous()?` on it first",
        ));
    };
    let fits = |v: usize| i32::try_from(v).is_ok();
    if ![m, n, k, lda, ldb].into_iter().all(fits) {
        return Err(Error::invalid(
            "matmul",
            format!(
                "cuBLAS takes dimensions below 2^31, got {m}×{k} · {k}×{n}; split the product into smaller ones"
            ),
        ));
    }
    let esize = dtype.size_in_bytes() as u64;
    let (one32, zero32, one64, zero64) = (1.0f32, 0.0f32, 1.0f64, 0.0f64);
    let (alpha, beta) = if dtype == DType::F64 {
        (
            &one64 as *const f64 as *const _,
            &zero64 as *const f64 as *const _,
        )
    } else {
        (
            &one32 as *const f32 as *const _,
            &zero32 as *const f32 as *const _,
        )
    };
    let pc = out;
    // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: B comes first.
    with_handle(g, workspace, |h| {
        // Evenly spaced batches (the usual case) are one strided-batched call; others one call
        // per batch.
        let step = |o: &[usize]| o.get(1).map_or(0, |&x| x as i64 - o[0] as i64);
        let evenly = |o: &[usize]| o.windows(2).all(|w| w[1] as i64 - w[0] as i64 == step(o));
        let calls: Vec<(usize, usize, usize, usize)> = if evenly(a_off) && evenly(b_off) {
            vec![(0, a_off[0], b_off[0], batches)]
        } else {
            (0..batches).map(|i| (i, a_off[i], b_off[i], 1)).collect()
        };
        for (i, ao, bo, count) in calls {
            unsafe {
                result::gemm_strided_batched_ex(
                    h,
                    op_b,
                    op_a,
                    n as i32,
                    m as i32,
                    k as i32,
                    alpha,
                    (pb + bo as u64 * esize) as *const _,
                    data_type,
                    ldb as i32,
                    step(b_off),
                    (pa + ao as u64 * esize) as *const _,
                    data_type,
                    lda as i32,
                    step(a_off),
                    beta,
                    (pc + (i * m * n) as u64 * esize) as *mut _,
                    data_type,
                    n as i32,
                    (m * n) as i64,
                    count as i32,
                    compute,
                    sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            .map_err(|e| blas_error(g, e))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sys::cublasOperation_t::{CUBLAS_OP_N as N, CUBLAS_OP_T as T};

    #[test]
    fn operands_map_to_cublas_without_copies() {
        // Row-major 3×4: cuBLAS reads its transpose directly, ld = 4.
        assert_eq!(operand(3, 4, 4, 1), Some((N, 4)));
        // The transpose of a row-major 4×3 (strides (1, 3)): op T, ld = 3.
        assert_eq!(operand(3, 4, 1, 3), Some((T, 3)));
        // A row of a larger matrix and a column vector: size-1 dims take any stride.
        assert_eq!(operand(1, 4, 999, 1), Some((N, 4)));
        assert_eq!(operand(4, 1, 7, 5), Some((N, 7)));
        // No unit stride: the caller must copy.
        assert_eq!(operand(3, 4, 8, 2), None);
    }

    #[test]
    fn workspace_follows_pytorch() {
        assert_eq!(workspace_bytes(9), 33_554_432);
        assert_eq!(workspace_bytes(8), 8_519_680);
    }
}
