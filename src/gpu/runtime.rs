//! One real GPU as the engine uses it: its primary context (created on first use, and timed,
//! since that one-time cost must never be counted as a transfer), one stream that every kernel,
//! copy and GEMM of the device runs on in order, the kernel modules loaded on it, its cuBLAS
//! handle, and the raw `cuMemAlloc`/`cuMemFree` allocator under the caching allocator.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, DriverError, result};
use cudarc::nvrtc::Ptx;

use super::nvrtc::{self, KernelSource};
use crate::alloc::caching::RawAllocator;
use crate::device::guard::guarded;
use crate::{Device, Error, Result};

pub(crate) struct Gpu {
    pub index: usize,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// Compute capability, e.g. (9, 0) for an H100.
    pub cc: (i32, i32),
    /// How long creating the context took (the first use of the device in this process).
    pub context_setup: Duration,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    functions: Mutex<HashMap<String, CudaFunction>>,
    /// The cuBLAS handle and what keeps its workspace allocated, made at the first GEMM.
    pub(super) blas: Mutex<Option<(CudaBlas, Box<dyn Send>)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn gpus() -> &'static Mutex<HashMap<usize, Arc<Gpu>>> {
    static GPUS: OnceLock<Mutex<HashMap<usize, Arc<Gpu>>>> = OnceLock::new();
    GPUS.get_or_init(Default::default)
}

/// The context setup times not yet reported, taken by the first transfer that follows.
fn unreported_setups() -> &'static Mutex<Vec<(usize, Duration)>> {
    static S: OnceLock<Mutex<Vec<(usize, Duration)>>> = OnceLock::new();
    S.get_or_init(Default::default)
}

/// `cuda:index` ready for work, its context created on first use.
pub(crate) fn gpu(index: usize) -> Result<Arc<Gpu>> {
    let mut map = lock(gpus());
    if let Some(g) = map.get(&index) {
        return Ok(g.clone());
    }
    let device = Device::Cuda(index);
    // NVRTC and cuBLAS from `PLACELAB_CUDA_LIB_DIRS` must be loaded before cudarc looks them up
    // by name, whichever of them the device's first op needs.
    super::libs::preload();
    let start = Instant::now();
    let ctx = guarded("creating the CUDA context", || CudaContext::new(index))
        .map_err(|msg| Error::DeviceUnavailable {
            device,
            reason: msg,
        })?
        .map_err(|e| Error::DeviceUnavailable {
            device,
            reason: format!("the driver could not create its context: {e}"),
        })?;
    let context_setup = start.elapsed();
    // One stream per device and no cudarc-managed slices: its per-slice event tracking would
    // only cost time.
    unsafe { ctx.disable_event_tracking() };
    let cc = ctx
        .compute_capability()
        .map_err(|e| driver_error("compute_capability", index, e))?;
    let stream = ctx.default_stream();
    let g = Arc::new(Gpu {
        index,
        ctx,
        stream,
        cc,
        context_setup,
        modules: Mutex::default(),
        functions: Mutex::default(),
        blas: Mutex::default(),
    });
    lock(unreported_setups()).push((index, context_setup));
    map.insert(index, g.clone());
    Ok(g)
}

/// How long creating `cuda:index`'s context took, if it has been created.
pub fn context_setup_time(index: usize) -> Option<Duration> {
    lock(gpus()).get(&index).map(|g| g.context_setup)
}

/// Context setups of `devices` not reported yet (each is reported once).
pub(crate) fn take_unreported_setup(devices: &[Device]) -> Option<Duration> {
    let mut pending = lock(unreported_setups());
    let mut total = None;
    pending.retain(|(i, d)| {
        let hit = devices.contains(&Device::Cuda(*i));
        if hit {
            *total.get_or_insert(Duration::ZERO) += *d;
        }
        !hit
    });
    total
}

pub(crate) fn driver_error(op: &'static str, index: usize, e: DriverError) -> Error {
    Error::Cuda {
        op,
        device: Device::Cuda(index),
        msg: e.to_string(),
    }
}

impl Gpu {
    pub(crate) fn err(&self, op: &'static str, e: DriverError) -> Error {
        driver_error(op, self.index, e)
    }

    pub(crate) fn device(&self) -> Device {
        Device::Cuda(self.index)
    }

    /// Makes this device's context current on the calling thread (driver calls need it).
    pub(crate) fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| self.err("bind context", e))
    }

    /// The kernel `name` of `source`, compiling and loading the file on first use.
    pub(crate) fn function(&self, source: &KernelSource, name: &str) -> Result<CudaFunction> {
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
        let f = module
            .load_function(name)
            .map_err(|e| self.err("load kernel", e))?;
        lock(&self.functions).insert(name.to_string(), f.clone());
        Ok(f)
    }

    /// Loads `source`'s CUBIN. One the driver refuses as an image (a damaged cache file) is
    /// compiled afresh once; any other failure (a context left broken by an earlier fault, say)
    /// is reported as it is.
    fn load_module(&self, source: &KernelSource) -> Result<Arc<CudaModule>> {
        use cudarc::driver::sys::CUresult as R;
        let load = |cubin: Vec<u8>| self.ctx.load_module(Ptx::from_binary(cubin));
        match load(nvrtc::cubin(source, self.cc)?) {
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
                load(nvrtc::cubin(source, self.cc)?).map_err(|e| self.err("load kernels", e))
            }
            Err(e) => Err(self.err("load kernels", e)),
        }
    }

    /// Waits for all work queued on the device.
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| self.err("synchronize", e))
    }
}

/// Device memory for the caching allocator, straight from the driver: `cuMemAlloc` for each new
/// segment, `cuMemFree` when `empty_cache` releases one (after the device's queued work is done,
/// since a kernel may still read a block freed on the host).
pub(crate) struct CudaMemory {
    gpu: Arc<Gpu>,
    /// The last failure that was not out-of-memory (a fault left by an earlier kernel, say), so
    /// that it is reported as what it is rather than as a full device.
    failure: Option<String>,
}

impl CudaMemory {
    pub(crate) fn new(index: usize) -> Result<CudaMemory> {
        Ok(CudaMemory {
            gpu: gpu(index)?,
            failure: None,
        })
    }
}

impl RawAllocator for CudaMemory {
    fn alloc(&mut self, size: usize) -> Option<usize> {
        // Out of memory makes the caching allocator release its cache and retry once, then
        // report the driver's free/total; any other failure (`failure`) is reported at once as
        // the driver's error.
        use cudarc::driver::sys::CUresult;
        let r = self
            .gpu
            .bind()
            .map_err(|e| Some(e.to_string()))
            .and_then(|()| {
                unsafe { result::malloc_sync(size) }
                    .map_err(|e| (e.0 != CUresult::CUDA_ERROR_OUT_OF_MEMORY).then(|| e.to_string()))
            });
        match r {
            Ok(p) => Some(p as usize),
            Err(failure) => {
                self.failure = failure;
                None
            }
        }
    }

    fn take_failure(&mut self) -> Option<String> {
        self.failure.take()
    }

    fn free(&mut self, addr: usize, _size: usize) {
        if self.gpu.synchronize().is_ok() {
            // A failure here leaves the segment with the driver until the process ends.
            let _ = unsafe { result::free_sync(addr as u64) };
        }
    }

    fn mem_info(&self) -> (usize, usize) {
        self.gpu.ctx.mem_get_info().unwrap_or((0, 0))
    }
}
