//! The driver seam on a real GPU, through cudarc: the device's primary context, its default
//! stream, kernel modules compiled by NVRTC and loaded on first use, `cuMemAlloc`, page-locked
//! host memory, timed events, and the cuBLAS handle made at the first GEMM. Every call binds the
//! context to the calling thread first (driver calls act on the current context).

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::cublas::{CudaBlas, result as blas_result, sys as blas_sys};
use cudarc::driver::{
    CudaContext, CudaEvent as CudarcEvent, CudaFunction, CudaModule, CudaStream, PushKernelArg,
    result, sys,
};
use cudarc::nvrtc::Ptx;

use super::args::Arg;
use super::blas_lt::{self, LtHandle};
use super::call::{DriverError, DriverResult, Gemm, Grid};
use super::nvrtc::{self, KernelSource};
use crate::base::dtype::DType;
use crate::device::Device;
use crate::device::current_stream::{StreamId, current, pool_slot};
use crate::device::guard::guarded;

pub(crate) struct CudaDriver {
    index: usize,
    ctx: Arc<CudaContext>,
    /// The device's streams by number: the default (legacy) stream first, then those made by
    /// `new_stream` (non-blocking, as PyTorch's side streams are).
    streams: Mutex<Vec<Arc<CudaStream>>>,
    /// Side streams asked for so far (`new_stream`).
    streams_asked: AtomicU64,
    cc: (i32, i32),
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    functions: Mutex<HashMap<String, CudaFunction>>,
    /// Never dropped: cudarc's `Drop` for it unwraps the destroy call's status, the one panic
    /// a driver error could still cause. The handle lives as long as the process.
    blas: Mutex<Option<ManuallyDrop<CudaBlas>>>,
    /// cuBLASLt, for GEMMs with a bias (`blas_lt`), made at the first.
    blas_lt: Mutex<Option<LtHandle>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn msg(e: cudarc::driver::DriverError) -> DriverError {
    DriverError::Cuda(e.to_string())
}

/// A CUDA event (timing enabled).
pub(crate) struct CudaEvent(CudarcEvent);

impl CudaEvent {
    pub(crate) fn synchronize(&self) -> DriverResult<()> {
        self.0.context().bind_to_thread().map_err(msg)?;
        self.0.synchronize().map_err(msg)
    }
    pub(crate) fn is_complete(&self) -> bool {
        // A context that cannot be bound, or a failed query (a fault in the work before the
        // event), reads as done, so that no wait spins forever: `synchronize` reports the error.
        self.0.context().bind_to_thread().is_err() || !matches!(self.0.try_is_complete(), Ok(false))
    }
    pub(crate) fn wait_up_to(&self, limit: Duration) -> bool {
        let start = Instant::now();
        loop {
            if self.is_complete() {
                return true;
            }
            if start.elapsed() >= limit {
                return false;
            }
            std::hint::spin_loop();
        }
    }
    pub(crate) fn elapsed_ms_since(&self, start: &CudaEvent) -> DriverResult<f32> {
        start.0.elapsed_ms(&self.0).map_err(msg)
    }
}

impl CudaDriver {
    /// Creates (or retains) `cuda:index`'s primary context. cudarc's loader panics when a
    /// library lacks a symbol: the panic becomes an error.
    pub(crate) fn new(index: usize) -> DriverResult<CudaDriver> {
        let ctx = guarded("creating the CUDA context", || CudaContext::new(index))
            .map_err(DriverError::Cuda)?
            .map_err(|e| {
                DriverError::Cuda(format!("the driver could not create its context: {e}"))
            })?;
        // No cudarc-managed slices: its per-slice event tracking would only cost time (the
        // caching allocator orders memory between streams itself, as PyTorch's does).
        unsafe { ctx.disable_event_tracking() };
        let cc = ctx.compute_capability().map_err(msg)?;
        let stream = ctx.default_stream();
        Ok(CudaDriver {
            index,
            ctx,
            streams: Mutex::new(vec![stream]),
            streams_asked: AtomicU64::new(0),
            cc,
            modules: Mutex::default(),
            functions: Mutex::default(),
            blas: Mutex::default(),
            blas_lt: Mutex::default(),
        })
    }

    fn bind(&self) -> DriverResult<()> {
        self.ctx.bind_to_thread().map_err(msg)
    }

    /// Stream `id` of this device.
    fn stream_of(&self, id: StreamId) -> DriverResult<Arc<CudaStream>> {
        lock(&self.streams)
            .get(id as usize)
            .cloned()
            .ok_or(DriverError::NoSuchStream(id))
    }

    /// The stream the calling thread queues this device's work on (`current_stream`).
    fn stream(&self) -> DriverResult<Arc<CudaStream>> {
        self.stream_of(current(Device::Cuda(self.index)))
    }

    /// A side stream (non-blocking) from the device's pool (`pool_slot`); its number.
    pub(crate) fn new_stream(&self) -> DriverResult<StreamId> {
        let id = pool_slot(self.streams_asked.fetch_add(1, Ordering::Relaxed));
        let mut streams = lock(&self.streams);
        // Callers at once may come in either order: make every stream up to this one.
        while streams.len() <= id as usize {
            self.bind()?;
            streams.push(self.ctx.new_stream().map_err(msg)?);
        }
        Ok(id)
    }

    pub(crate) fn stream_count(&self) -> usize {
        lock(&self.streams).len()
    }

    /// The kernel `name` of `source`, compiling and loading the file on first use.
    fn function(&self, source: &KernelSource, name: &str) -> DriverResult<CudaFunction> {
        if let Some(f) = lock(&self.functions).get(name) {
            return Ok(f.clone());
        }
        self.bind()?;
        let module = {
            let mut modules = lock(&self.modules);
            match modules.get(source.name) {
                Some(m) => m.clone(),
                None => {
                    let m = self.load_module(source)?;
                    modules.insert(source.name, m.clone());
                    m
                }
            }
        };
        let f = module.load_function(name).map_err(msg)?;
        lock(&self.functions).insert(name.to_string(), f.clone());
        Ok(f)
    }

    /// Loads `source`'s CUBIN. One the driver refuses as an image (a damaged cache file) is
    /// compiled afresh once; any other failure (a context left broken by an earlier fault, say)
    /// is reported as it is.
    fn load_module(&self, source: &KernelSource) -> DriverResult<Arc<CudaModule>> {
        use cudarc::driver::sys::CUresult as R;
        let load = |cubin: Vec<u8>| self.ctx.load_module(Ptx::from_binary(cubin));
        let compile =
            || nvrtc::cubin(source, self.cc).map_err(|e| DriverError::Cuda(e.to_string()));
        match load(compile()?) {
            Ok(m) => Ok(m),
            Err(e)
                if matches!(
                    e.0,
                    R::CUDA_ERROR_INVALID_IMAGE
                        | R::CUDA_ERROR_NO_BINARY_FOR_GPU
                        | R::CUDA_ERROR_INVALID_PTX
                        | R::CUDA_ERROR_INVALID_SOURCE
                ) =>
            {
                nvrtc::forget_cached(source, self.cc);
                load(compile()?).map_err(msg)
            }
            Err(e) => Err(msg(e)),
        }
    }

    /// The device's number (`cuda:index`).
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    pub(crate) fn name(&self) -> DriverResult<String> {
        self.ctx.name().map_err(msg)
    }

    pub(crate) fn compute_capability(&self) -> (i32, i32) {
        self.cc
    }

    pub(crate) fn malloc(&self, bytes: usize) -> DriverResult<u64> {
        self.bind()?;
        unsafe { result::malloc_sync(bytes) }.map_err(|e| {
            if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                DriverError::OutOfMemory
            } else {
                msg(e)
            }
        })
    }

    pub(crate) unsafe fn free(&self, ptr: u64, _bytes: usize) {
        // A kernel still queued on any stream may read the block: wait for the device first. A
        // failure here leaves the segment with the driver until the process ends.
        if self.synchronize().is_ok() {
            let _ = unsafe { result::free_sync(ptr) };
        }
    }

    pub(crate) fn mem_info(&self) -> (usize, usize) {
        self.ctx.mem_get_info().unwrap_or((0, 0))
    }

    pub(crate) fn malloc_host(&self, bytes: usize) -> DriverResult<*mut u8> {
        self.bind()?;
        // PORTABLE: every context may use it as pinned memory, not only this one's. Flags 0
        // otherwise: not write-combined, so the CPU reads it at full speed.
        unsafe { result::malloc_host(bytes.max(1), sys::CU_MEMHOSTALLOC_PORTABLE) }
            .map(|p| p as *mut u8)
            .map_err(msg)
    }

    pub(crate) unsafe fn free_host(&self, ptr: *mut u8, _bytes: usize) {
        if self.bind().is_ok() {
            let _ = unsafe { result::free_host(ptr as *mut _) };
        }
    }

    pub(crate) unsafe fn copy_htod(&self, dst: u64, src: &[u8]) -> DriverResult<()> {
        self.bind()?;
        let stream = self.stream()?;
        unsafe { result::memcpy_htod_async(dst, src, stream.cu_stream()) }.map_err(msg)
    }

    pub(crate) unsafe fn copy_dtoh(&self, dst: &mut [u8], src: u64) -> DriverResult<()> {
        self.bind()?;
        let stream = self.stream()?;
        unsafe { result::memcpy_dtoh_async(dst, src, stream.cu_stream()) }.map_err(msg)
    }

    pub(crate) unsafe fn copy_peer(
        &self,
        to: &CudaDriver,
        dst: u64,
        src: u64,
        bytes: usize,
    ) -> DriverResult<()> {
        self.bind()?;
        let stream = self.stream()?;
        unsafe {
            result::memcpy_peer_async(
                to.ctx.cu_ctx(),
                dst,
                self.ctx.cu_ctx(),
                src,
                bytes,
                stream.cu_stream(),
            )
        }
        .map_err(msg)
    }

    pub(crate) fn enable_peer_access(&self, to: &CudaDriver) -> DriverResult<bool> {
        let mut can = 0;
        let status = unsafe {
            sys::cuDeviceCanAccessPeer(&mut can, self.ctx.cu_device(), to.ctx.cu_device())
        };
        if status != sys::CUresult::CUDA_SUCCESS {
            return Err(DriverError::Cuda(format!(
                "cuDeviceCanAccessPeer: {status:?}"
            )));
        }
        if can == 0 {
            return Ok(false);
        }
        self.bind()?;
        match unsafe { sys::cuCtxEnablePeerAccess(to.ctx.cu_ctx(), 0) } {
            sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
                Ok(true)
            }
            status => Err(DriverError::Cuda(format!(
                "cuCtxEnablePeerAccess: {status:?}"
            ))),
        }
    }

    pub(crate) fn new_event(&self) -> DriverResult<CudaEvent> {
        self.bind()?;
        let e = self
            .ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(msg)?;
        Ok(CudaEvent(e))
    }

    pub(crate) fn record_on(&self, e: &CudaEvent, stream: StreamId) -> DriverResult<()> {
        self.bind()?;
        let stream = self.stream_of(stream)?;
        e.0.record(&stream).map_err(msg)
    }

    pub(crate) fn wait_event_on(&self, stream: StreamId, e: &CudaEvent) -> DriverResult<()> {
        self.bind()?;
        self.stream_of(stream)?.wait(&e.0).map_err(msg)
    }

    /// Waits for the work queued on every stream of the device (`cuCtxSynchronize`).
    pub(crate) fn synchronize(&self) -> DriverResult<()> {
        self.ctx.synchronize().map_err(msg)
    }

    pub(crate) fn stream_is_idle(&self, stream: StreamId) -> DriverResult<bool> {
        self.bind()?;
        let s = self.stream_of(stream)?;
        match unsafe { sys::cuStreamQuery(s.cu_stream()) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            status => Err(DriverError::Cuda(format!("cuStreamQuery: {status:?}"))),
        }
    }

    pub(crate) unsafe fn launch(
        &self,
        source: &KernelSource,
        name: &str,
        grid: Grid,
        args: &[Arg],
    ) -> DriverResult<()> {
        let f = self.function(source, name)?;
        self.bind()?;
        let stream = self.stream()?;
        let mut b = stream.launch_builder(&f);
        for a in args {
            match a {
                Arg::U64(v) => b.arg(v),
                Arg::I32(v) => b.arg(v),
                Arg::F32(v) => b.arg(v),
                Arg::Strided(v) => b.arg(v),
                Arg::List(v) => b.arg(&**v),
            };
        }
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: grid.blocks,
            block_dim: grid.threads,
            shared_mem_bytes: grid.shared_bytes,
        };
        // SAFETY: the caller vouches for the pointers; the argument kinds are checked against
        // the compiled kernels by the tests (`engine/tests/kernels_nvrtc.rs`) and by the emulator.
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(msg)
    }

    pub(crate) unsafe fn gemm(&self, c: &Gemm, (ws, ws_bytes): (u64, usize)) -> DriverResult<()> {
        // Held for the call: one GEMM at a time on the device's handles.
        // SAFETY: the caller vouches for the workspace.
        let slot = unsafe { self.cublas((ws, ws_bytes)) }?;
        let handle = *slot.as_ref().expect("created above").handle();
        self.bind()?;
        // SAFETY: the caller vouches for the workspace.
        let (ws, ws_bytes) = unsafe { self.on_current_stream(handle, (ws, ws_bytes)) }?;
        if c.bias != 0 {
            // SAFETY: as for the cuBLAS call below.
            return unsafe { self.gemm_with_bias(c, (ws, ws_bytes)) };
        }
        let (data_type, compute) = cublas_types(c)?;
        let (one32, one64) = (1.0f32, 1.0f64);
        let (beta32, beta64) = match c.accumulate {
            true => (1.0f32, 1.0f64),
            false => (0.0f32, 0.0f64),
        };
        let (alpha, beta) = if c.dtype == DType::F64 {
            (
                &one64 as *const f64 as *const _,
                &beta64 as *const f64 as *const _,
            )
        } else {
            (
                &one32 as *const f32 as *const _,
                &beta32 as *const f32 as *const _,
            )
        };
        let batch = i32::try_from(c.batch).map_err(|_| {
            DriverError::Cuda(format!(
                "cuBLAS takes fewer than 2^31 matrices in one call, got {}; split the batch",
                c.batch
            ))
        })?;
        unsafe {
            blas_result::gemm_strided_batched_ex(
                handle,
                op(c.trans_a),
                op(c.trans_b),
                c.m as i32,
                c.n as i32,
                c.k as i32,
                alpha,
                c.a as *const _,
                data_type,
                c.lda as i32,
                c.stride_a,
                c.b as *const _,
                data_type,
                c.ldb as i32,
                c.stride_b,
                beta,
                c.c as *mut _,
                data_type,
                c.ldc as i32,
                c.stride_c,
                batch,
                compute,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| DriverError::Cuda(e.to_string()))
    }

    /// Sets cuBLAS's `handle` to queue on the calling thread's current stream, with the
    /// workspace that stream may use; returns that workspace. The one workspace belongs to the
    /// default stream: a GEMM on a side stream may run while one on the default stream uses it,
    /// so side streams' GEMMs get none (PyTorch keeps a workspace per stream instead).
    ///
    /// # Safety
    /// `handle` is live; `ws` is live device memory of `ws_bytes`.
    unsafe fn on_current_stream(
        &self,
        handle: blas_sys::cublasHandle_t,
        (ws, ws_bytes): (u64, usize),
    ) -> DriverResult<(u64, usize)> {
        let id = current(Device::Cuda(self.index));
        let (ws, ws_bytes) = if id == 0 { (ws, ws_bytes) } else { (0, 0) };
        let stream = self.stream_of(id)?.cu_stream();
        // SAFETY: a live handle, stream and workspace (or none).
        for status in unsafe {
            [
                blas_sys::cublasSetStream_v2(handle, stream as _),
                blas_sys::cublasSetWorkspace_v2(handle, ws as *mut _, ws_bytes),
            ]
        } {
            if status != blas_sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(DriverError::Cuda(format!(
                    "setting cuBLAS's stream: {status:?}"
                )));
            }
        }
        Ok((ws, ws_bytes))
    }

    /// The device's cuBLAS handle, locked: made at the first GEMM (each GEMM sets its stream and
    /// workspace).
    ///
    /// # Safety
    /// As `gemm`: the workspace is live device memory, kept as long as the handle lives.
    unsafe fn cublas(
        &self,
        (ws, ws_bytes): (u64, usize),
    ) -> DriverResult<std::sync::MutexGuard<'_, Option<ManuallyDrop<CudaBlas>>>> {
        let mut slot = lock(&self.blas);
        if slot.is_none() {
            let default = self.stream_of(0)?;
            let blas = guarded("loading cuBLAS", || CudaBlas::new(default))
                .map_err(DriverError::Cuda)?
                .map_err(|e| DriverError::Cuda(e.to_string()))?;
            let blas = ManuallyDrop::new(blas);
            let status =
                unsafe { blas_sys::cublasSetWorkspace_v2(*blas.handle(), ws as *mut _, ws_bytes) };
            if status != blas_sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(DriverError::Cuda(format!("{status:?}")));
            }
            *slot = Some(blas);
        }
        Ok(slot)
    }

    /// A GEMM with a bias in its epilogue, through cuBLASLt (its handle made at the first).
    ///
    /// # Safety
    /// As `gemm`.
    unsafe fn gemm_with_bias(&self, c: &Gemm, ws: (u64, usize)) -> DriverResult<()> {
        let mut lt = lock(&self.blas_lt);
        if lt.is_none() {
            *lt = Some(guarded("loading cuBLASLt", LtHandle::new).map_err(DriverError::Cuda)??);
        }
        let lt = lt.as_ref().expect("created above");
        let stream = self.stream()?.cu_stream() as *mut std::ffi::c_void;
        // SAFETY: the caller vouches for the operands, bias and workspace.
        unsafe { blas_lt::gemm_with_bias(lt, stream, c, ws) }
    }
}

/// cuBLAS's data and compute types for a GEMM of `c.dtype` (TF32 tensor cores when allowed).
fn cublas_types(c: &Gemm) -> DriverResult<(blas_sys::cudaDataType, blas_sys::cublasComputeType_t)> {
    use blas_sys::cublasComputeType_t as C;
    use blas_sys::cudaDataType as D;
    Ok(match c.dtype {
        DType::F32 if c.allow_tf32 => (D::CUDA_R_32F, C::CUBLAS_COMPUTE_32F_FAST_TF32),
        DType::F32 => (D::CUDA_R_32F, C::CUBLAS_COMPUTE_32F),
        DType::F64 => (D::CUDA_R_64F, C::CUBLAS_COMPUTE_64F),
        DType::F16 => (D::CUDA_R_16F, C::CUBLAS_COMPUTE_32F),
        DType::BF16 => (D::CUDA_R_16BF, C::CUBLAS_COMPUTE_32F),
        d => return Err(DriverError::Cuda(format!("cuBLAS has no {d} GEMM"))),
    })
}

/// cuBLAS's operation for an operand read transposed (`t`) or as stored.
fn op(t: bool) -> blas_sys::cublasOperation_t {
    if t {
        blas_sys::cublasOperation_t::CUBLAS_OP_T
    } else {
        blas_sys::cublasOperation_t::CUBLAS_OP_N
    }
}
