//! A GEMM with its bias through cuBLASLt (`addmm`, so every `Linear`): the bias joins the product
//! in the GEMM's epilogue, as PyTorch's `addmm` runs it (`gemm_and_bias` in its `CUDABlas.cpp`).
//! Before this, the bias was broadcast into the output by a kernel of its own and cuBLAS added
//! the product onto it (β = 1); on an H200 cuBLAS then picked slower f32 kernels than cuBLASLt
//! does, and the forward GEMMs of a 1024-4096-4096-10 step took 980 µs against PyTorch's 884.

use std::ffi::c_void;
use std::mem::size_of;

use cudarc::cublaslt::{result as lt, sys};

use super::call::{DriverError, DriverResult, Gemm};
use crate::base::dtype::DType;

/// A cuBLASLt handle, made at a device's first biased GEMM and kept for the process's life (as
/// cuBLAS's is: destroying it at exit could meet a context already gone).
pub(crate) struct LtHandle(sys::cublasLtHandle_t);

// SAFETY: a cuBLASLt handle may be used from any thread, one call at a time (the driver's mutex).
unsafe impl Send for LtHandle {}

impl LtHandle {
    pub(crate) fn new() -> DriverResult<LtHandle> {
        lt::create_handle().map(LtHandle).map_err(cublaslt_error)
    }
}

/// The descriptors of one call, destroyed when it is queued (cuBLASLt reads them on the host
/// only, during the call).
struct Descriptors {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: Vec<sys::cublasLtMatrixLayout_t>,
    pref: Option<sys::cublasLtMatmulPreference_t>,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each was created once, by this call, and is destroyed once.
        unsafe {
            let _ = lt::destroy_matmul_desc(self.desc);
            for &l in &self.layouts {
                let _ = lt::destroy_matrix_layout(l);
            }
            if let Some(p) = self.pref {
                let _ = lt::destroy_matmul_pref(p);
            }
        }
    }
}

fn cublaslt_error(e: lt::CublasError) -> DriverError {
    DriverError::Cuda(e.to_string())
}

/// Sets one attribute of a descriptor to the bytes of `value`.
///
/// # Safety
/// `T` is the type cuBLASLt documents for `attr`.
unsafe fn set<T>(
    desc: sys::cublasLtMatmulDesc_t,
    attr: sys::cublasLtMatmulDescAttributes_t,
    value: &T,
) -> DriverResult<()> {
    let ptr = value as *const T as *const c_void;
    unsafe { lt::set_matmul_desc_attribute(desc, attr, ptr, size_of::<T>()) }
        .map_err(cublaslt_error)
}

/// Queues column-major `C = op(A)·op(B) + bias` on `stream`, `bias` (`c.bias`) a vector of `c.m`
/// elements added to every column, with the workspace `(ws, ws_bytes)` (cuBLAS's: both libraries
/// queue on one stream, so they never use it at once). One matrix (`c.batch` 1), β = 0.
///
/// # Safety
/// As `Driver::gemm`: every operand, the bias and the workspace are live device memory.
pub(crate) unsafe fn gemm_with_bias(
    handle: &LtHandle,
    stream: *mut c_void,
    c: &Gemm,
    (ws, ws_bytes): (u64, usize),
) -> DriverResult<()> {
    let d = Descriptors::of(c, ws_bytes)?;
    let heuristic = d.fastest_algorithm(handle)?;
    let (la, lb, lc) = (d.layouts[0], d.layouts[1], d.layouts[2]);
    let (one32, zero32, one64, zero64) = (1.0f32, 0.0f32, 1.0f64, 0.0f64);
    let (alpha, beta) = match c.dtype {
        DType::F64 => (
            &one64 as *const f64 as *const c_void,
            &zero64 as *const f64 as *const c_void,
        ),
        _ => (
            &one32 as *const f32 as *const c_void,
            &zero32 as *const f32 as *const c_void,
        ),
    };
    let out = c.c as *mut c_void;
    // SAFETY: the caller vouches for the operands, bias and workspace; the scalars live until
    // the call returns (cuBLASLt reads host scalars before it returns).
    unsafe {
        lt::matmul(
            handle.0,
            d.desc,
            alpha,
            beta,
            c.a as *const c_void,
            la,
            c.b as *const c_void,
            lb,
            out,
            lc,
            out,
            lc,
            &heuristic.algo,
            ws as *mut c_void,
            ws_bytes,
            stream as sys::cudaStream_t,
        )
    }
    .map_err(cublaslt_error)
}

/// cuBLASLt's (data, compute, scale) types for a GEMM of `c.dtype` (TF32 tensor cores when
/// allowed; halves accumulate in f32).
fn types(
    c: &Gemm,
) -> DriverResult<(
    sys::cudaDataType_t,
    sys::cublasComputeType_t,
    sys::cudaDataType_t,
)> {
    use sys::cublasComputeType_t as Compute;
    use sys::cudaDataType_t as Data;
    Ok(match c.dtype {
        DType::F32 if c.allow_tf32 => (
            Data::CUDA_R_32F,
            Compute::CUBLAS_COMPUTE_32F_FAST_TF32,
            Data::CUDA_R_32F,
        ),
        DType::F32 => (
            Data::CUDA_R_32F,
            Compute::CUBLAS_COMPUTE_32F,
            Data::CUDA_R_32F,
        ),
        DType::F64 => (
            Data::CUDA_R_64F,
            Compute::CUBLAS_COMPUTE_64F,
            Data::CUDA_R_64F,
        ),
        DType::F16 => (
            Data::CUDA_R_16F,
            Compute::CUBLAS_COMPUTE_32F,
            Data::CUDA_R_32F,
        ),
        DType::BF16 => (
            Data::CUDA_R_16BF,
            Compute::CUBLAS_COMPUTE_32F,
            Data::CUDA_R_32F,
        ),
        d => return Err(DriverError::Cuda(format!("cuBLASLt has no {d} GEMM"))),
    })
}

impl Descriptors {
    /// The descriptors of `c`: the operation with its bias epilogue, the layouts of A, B and C,
    /// and a preference that keeps to a workspace of `ws_bytes`.
    fn of(c: &Gemm, ws_bytes: usize) -> DriverResult<Descriptors> {
        let (data, compute, scale) = types(c)?;
        let mut d = Descriptors {
            desc: lt::create_matmul_desc(compute, scale).map_err(cublaslt_error)?,
            layouts: Vec::new(),
            pref: None,
        };
        d.set_operation(c)?;
        d.add_layouts(c, data)?;
        d.add_preference(ws_bytes)?;
        Ok(d)
    }

    /// Each operand read as stored or transposed, and the bias `c.bias` added in the epilogue.
    fn set_operation(&self, c: &Gemm) -> DriverResult<()> {
        use sys::cublasLtMatmulDescAttributes_t as Attr;
        // cublasOperation_t: 0 reads the operand as stored, 1 transposed.
        let (op_a, op_b) = (i32::from(c.trans_a), i32::from(c.trans_b));
        let bias = c.bias as *const c_void;
        // SAFETY: each attribute with the type cuBLASLt documents for it.
        unsafe {
            set(self.desc, Attr::CUBLASLT_MATMUL_DESC_TRANSA, &op_a)?;
            set(self.desc, Attr::CUBLASLT_MATMUL_DESC_TRANSB, &op_b)?;
            set(
                self.desc,
                Attr::CUBLASLT_MATMUL_DESC_EPILOGUE,
                &sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
            )?;
            set(self.desc, Attr::CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias)?;
        }
        Ok(())
    }

    /// The layouts of A, B and C, each as stored, column-major: op(A) is m × k, op(B) is k × n.
    fn add_layouts(&mut self, c: &Gemm, data: sys::cudaDataType_t) -> DriverResult<()> {
        let (a_rows, a_cols) = if c.trans_a { (c.k, c.m) } else { (c.m, c.k) };
        let (b_rows, b_cols) = if c.trans_b { (c.n, c.k) } else { (c.k, c.n) };
        for (rows, cols, ld) in [
            (a_rows, a_cols, c.lda),
            (b_rows, b_cols, c.ldb),
            (c.m, c.n, c.ldc),
        ] {
            let layout = lt::create_matrix_layout(data, rows as u64, cols as u64, ld as i64)
                .map_err(cublaslt_error)?;
            self.layouts.push(layout);
        }
        Ok(())
    }

    /// A preference for algorithms that need at most `ws_bytes` of workspace.
    fn add_preference(&mut self, ws_bytes: usize) -> DriverResult<()> {
        let pref = lt::create_matmul_pref().map_err(cublaslt_error)?;
        self.pref = Some(pref);
        let max_ws = ws_bytes as u64;
        let attr =
            sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES;
        let max_ws_ptr = &max_ws as *const u64 as *const c_void;
        // SAFETY: the workspace limit is a u64, as documented.
        unsafe { lt::set_matmul_pref_attribute(pref, attr, max_ws_ptr, size_of::<u64>()) }
            .map_err(cublaslt_error)
    }

    /// The algorithm cuBLASLt's heuristic ranks fastest for these descriptors.
    fn fastest_algorithm(
        &self,
        handle: &LtHandle,
    ) -> DriverResult<sys::cublasLtMatmulHeuristicResult_t> {
        let (la, lb, lc) = (self.layouts[0], self.layouts[1], self.layouts[2]);
        let pref = self.pref.expect("made with the descriptors");
        // SAFETY: descriptors made for this call.
        unsafe { lt::get_matmul_algo_heuristic(handle.0, self.desc, la, lb, lc, lc, pref) }.map_err(
            |e| {
                DriverError::Cuda(format!(
                    "cuBLASLt found no algorithm for this GEMM with a bias: {e}"
                ))
            },
        )
    }
}
