//! Matrix multiplication on a real GPU through cuBLAS: f32 (TF32 tensor cores only when
//! `set_allow_tf32(true)`, PyTorch's default being off), f64, and f16/bf16 through `cublasGemmEx`
//! with f32 accumulation. Like PyTorch, the first GEMM on a device takes a cuBLAS workspace from
//! the caching allocator, so it shows in `memory_allocated` from then on.

use std::sync::atomic::{AtomicBool, Ordering};

use super::call::Gemm;
use super::runtime::Gpu;
use crate::base::dtype::DType;
use crate::base::op::Op;
use crate::device::error::{Error, Result};

/// Memory for cuBLAS's workspace, asked of the caller at a device's first GEMM: the device
/// address of `bytes` bytes, and what keeps them allocated for as long as the handle lives.
pub(crate) type WorkspaceSource<'a> = &'a dyn Fn(usize) -> Result<(u64, Box<dyn Send>)>;

/// What a GEMM does with its output C.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Onto {
    /// C = A·B.
    Overwrite,
    /// C += A·B (β = 1).
    Accumulate,
    /// C = A·B + the row at this device address in every row (one matrix): `addmm`'s bias, in
    /// the GEMM's epilogue.
    Bias(u64),
}

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
/// `Some((transposed, leading dimension))`.
fn operand(rows: usize, cols: usize, rs: usize, cs: usize) -> Option<(bool, usize)> {
    // Strides of size-1 dims are arbitrary; give them the value that makes the check pass.
    let rs = if rows <= 1 { cols.max(1) } else { rs };
    let cs = if cols <= 1 { 1 } else { cs };
    if cs == 1 && rs >= cols.max(1) {
        Some((false, rs))
    } else if rs == 1 && cs >= rows.max(1) {
        Some((true, cs))
    } else {
        None
    }
}

/// Whether cuBLAS multiplies matrices of `dtype` (floats only; an error that says what to do).
pub(crate) fn check_dtype(dtype: DType) -> Result<()> {
    match dtype {
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => Ok(()),
        d => Err(Error::UnsupportedDType {
            op: Op::Matmul.name(),
            dtype: d,
            hint: "matmul on a CUDA device takes float dtypes only (cuBLAS has no integer GEMM, and PyTorch's CUDA matmul refuses integers too); convert first, e.g. `x.to_dtype(DType::F32)?`, or multiply on the CPU.".into(),
        }),
    }
}

fn blas_error(g: &Gpu, e: impl std::fmt::Display) -> Error {
    Error::Cuda {
        op: Op::Matmul.name(),
        device: g.device(),
        msg: format!("cuBLAS: {e}"),
    }
}

/// The device's cuBLAS workspace, taken from `workspace` at its first GEMM and kept.
fn workspace_of(g: &Gpu, workspace: WorkspaceSource) -> Result<(u64, usize)> {
    let mut slot = g.workspace.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_none() {
        let bytes = workspace_bytes(g.cc.0);
        let (ptr, keep) = workspace(bytes)?;
        *slot = Some((ptr, bytes, keep));
    }
    let (ptr, bytes, _) = slot.as_ref().expect("taken above");
    Ok((*ptr, *bytes))
}

/// `a · b` for each batch into the contiguous `batch × m × n` buffer at `out`, or with
/// `accumulate` added onto what it holds (β = 1: PyTorch's `addmm`); the batch count is `a`'s
/// number of offsets.
pub(crate) fn matmul(
    g: &Gpu,
    dtype: DType,
    (pa, a_off, a_strides): Operand,
    (pb, b_off, b_strides): Operand,
    (m, n, k): (usize, usize, usize),
    (out, onto): (u64, Onto),
    workspace: WorkspaceSource,
) -> Result<()> {
    let accumulate = onto == Onto::Accumulate;
    check_dtype(dtype)?;
    let batches = a_off.len();
    if batches == 0 || m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        return empty_product(g, dtype, (out, onto), batches * m * n);
    }
    let ((trans_a, lda), (trans_b, ldb)) = cublas_operands((m, n, k), a_strides, b_strides)?;
    let ws = workspace_of(g, workspace)?;
    let esize = dtype.size_in_bytes() as u64;
    for (i, ao, bo, count) in calls(a_off, b_off) {
        // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: B comes first.
        let call = Gemm {
            dtype,
            trans_a: trans_b,
            trans_b: trans_a,
            m: n,
            n: m,
            k,
            a: pb + bo as u64 * esize,
            lda: ldb,
            stride_a: batch_step(b_off),
            b: pa + ao as u64 * esize,
            ldb: lda,
            stride_b: batch_step(a_off),
            c: out + (i * m * n) as u64 * esize,
            ldc: n,
            stride_c: (m * n) as i64,
            batch: count,
            accumulate,
            allow_tf32: allow_tf32(),
            bias: bias_of(onto, count)?,
        };
        // SAFETY: the storage layer hands over live blocks holding every matrix the offsets
        // and strides address, and an output of `batches × m × n` elements.
        unsafe { g.driver.gemm(&call, ws) }.map_err(|e| blas_error(g, e))?;
    }
    Ok(())
}

/// A product over an empty sum (`k` = 0) into the `len` elements at `out`: zeros, or nothing to
/// add.
fn empty_product(g: &Gpu, dtype: DType, (out, onto): (u64, Onto), len: usize) -> Result<()> {
    match onto {
        Onto::Accumulate => Ok(()),
        Onto::Overwrite => super::ops::fill(g, dtype, out, len, crate::base::dtype::Scalar::Int(0)),
        // The storage layer broadcasts the bias itself when there is no product to add.
        Onto::Bias(_) => Err(Error::invalid(
            Op::Addmm,
            "an empty product takes no bias epilogue",
        )),
    }
}

/// How cuBLAS reads A (`m × k`) and B (`k × n`) with their (row, column) strides: each one's
/// `(transposed, leading dimension)`, or an error if it cannot read one in place or a size is
/// beyond its `i32`s.
fn cublas_operands(
    (m, n, k): (usize, usize, usize),
    (a_rs, a_cs): (usize, usize),
    (b_rs, b_cs): (usize, usize),
) -> Result<((bool, usize), (bool, usize))> {
    let (Some((trans_a, lda)), Some((trans_b, ldb))) =
        (operand(m, k, a_rs, a_cs), operand(k, n, b_rs, b_cs))
    else {
        // Neither stride is 1 (a strided view of a view): the tensor layer hands such operands
        // over contiguous, so this is a bug, not a user mistake.
        return Err(Error::invalid(
            Op::Matmul,
            "an operand has no unit stride; call `.contiguous()?` on it first",
        ));
    };
    let fits = |v: usize| i32::try_from(v).is_ok();
    if ![m, n, k, lda, ldb].into_iter().all(fits) {
        return Err(Error::invalid(
            Op::Matmul,
            format!(
                "cuBLAS takes dimensions below 2^31, got {m}×{k} · {k}×{n}; split the product into smaller ones"
            ),
        ));
    }
    Ok(((trans_a, lda), (trans_b, ldb)))
}

/// The distance between the first two batches' matrices (0 for one batch).
#[inline]
fn batch_step(offsets: &[usize]) -> i64 {
    offsets.get(1).map_or(0, |&x| x as i64 - offsets[0] as i64)
}

/// The GEMM calls a batch takes, each `(first batch, its A offset, its B offset, batches)`:
/// evenly spaced batches (the usual case) are one strided-batched call, others one call per
/// batch.
fn calls(a_off: &[usize], b_off: &[usize]) -> Vec<(usize, usize, usize, usize)> {
    let evenly = |o: &[usize]| {
        o.windows(2)
            .all(|w| w[1] as i64 - w[0] as i64 == batch_step(o))
    };
    let batches = a_off.len();
    if evenly(a_off) && evenly(b_off) {
        vec![(0, a_off[0], b_off[0], batches)]
    } else {
        (0..batches).map(|i| (i, a_off[i], b_off[i], 1)).collect()
    }
}

/// The bias a call adds in its epilogue (0 for none): `addmm`'s, which joins one matrix product.
fn bias_of(onto: Onto, count: usize) -> Result<u64> {
    match onto {
        Onto::Bias(bias) if count == 1 => Ok(bias),
        Onto::Bias(_) => Err(Error::invalid(
            Op::Addmm,
            "a bias joins one matrix product, not a batch",
        )),
        _ => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const N: bool = false;
    const T: bool = true;

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
