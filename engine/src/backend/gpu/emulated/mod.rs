//! Emulated CUDA devices (`PLACELAB_EMULATE_CUDA`, `cuda::emulate`): the driver seam
//! implemented on the host, so that every path of the CUDA backend runs without a GPU.
//! - Device memory is host memory with a set capacity, under the same caching allocator.
//! - Kernels are the real `kernels/*.cu`, compiled for the host by `build.rs`; a launch runs
//!   its blocks in parallel, each block's threads as fibers with real `__syncthreads` barriers.
//! - Each stream is a worker thread: kernels, copies and event records run in order, and the
//!   host goes on; a device's streams run beside each other. A copy from pinned memory really is
//!   queued and overlaps; pageable memory is staged (to the device) or waited for (to the host),
//!   as the CUDA driver does. Copies take one of the device's two copy engines, one each way, as
//!   a GPU's: two uploads on two streams run one after the other, an upload and a kernel at once.
//! - Events are host timestamps taken when the stream reaches them.
//! - GEMM is the one part not emulated: it runs the CPU backend's matmul (cuBLAS's source is not
//!   public); f16/bf16 are multiplied in f32 and rounded once, as cuBLAS's 32-bit compute does.
//!
//! What the emulation proves and what only a GPU can is in the README ("Real GPUs").

mod kernels;
mod library;
mod stream;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub use kernels::checks_bounds;
use kernels::mark_usable;

/// Checks a launch of kernel `name` as the emulator does before it queues one: the kernel
/// exists in `kernels/*.cu`, `args` fill its parameters as the C++ compiler declared them, and
/// `grid` is within CUDA's limits. The error names the kernel.
pub fn check_launch(name: &str, grid: Grid, args: &[Arg]) -> Result<(), String> {
    kernels::check_launch(name, grid, args).map(|_| ())
}

/// The parameters of kernel `name` as the C++ compiler declared them, if `kernels/*.cu` has it.
pub fn kernel_params(name: &str) -> Option<Vec<Param>> {
    kernels::kernels().ok()?.get(name).map(|k| k.params.clone())
}
pub(crate) use stream::Event as EmulatedEvent;
pub use stream::Hold;
use stream::{DeviceFailure, Stream};

use super::args::{Arg, Param};
use super::call::{DriverError, DriverResult, Gemm, Grid};
use super::nvrtc::KernelSource;
use crate::backend::alloc::caching::RawAllocator;
use crate::backend::alloc::host::HostMemory;
use crate::backend::cpu::matmul::{Matmul, Operand};
use crate::base::dtype::DType;
use crate::device::Device;
use crate::device::current_stream::{StreamId, current, pool_slot};

/// The compute capability an emulated device reports: an H100's, so that what depends on it
/// (cuBLAS's workspace size) is what a learner's H100 shows.
pub const EMULATED_CC: (i32, i32) = (9, 0);

/// The most blocks a reduction's grid gets on an emulated device (on a real GPU, 2^16); its
/// kernels walk the rest with grid-stride loops. The emulator runs the blocks on rayon's threads,
/// one block at a time each, every barrier a fiber switch: 2^10 blocks keep every core busy, and
/// a reduction's blocks walk several rows from 1,025 rows on, so tests reach that path cheaply.
pub const MAX_GRID_BLOCKS: usize = 1 << 10;

pub(crate) struct EmulatedDriver {
    index: usize,
    /// The device's streams by number, the default stream first.
    streams: Mutex<Vec<Arc<Stream>>>,
    failure: DeviceFailure,
    /// Side streams asked for so far (`new_stream`).
    streams_asked: AtomicU64,
    /// The copy engines, one each way (to the device; from it, peer copies too): a copy holds
    /// its engine while it runs.
    engines: Arc<[Mutex<()>; 2]>,
    memory: Mutex<HostMemory>,
}

/// The copy engine a copy takes (`EmulatedDriver::engines`).
#[derive(Clone, Copy)]
enum Engine {
    ToDevice = 0,
    FromDevice = 1,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Page-locked host memory handed out by `malloc_host`, by start address (every emulated
/// device's copies treat it as pinned, as `CU_MEMHOSTALLOC_PORTABLE` memory is).
fn pinned() -> &'static Mutex<BTreeMap<usize, usize>> {
    static P: OnceLock<Mutex<BTreeMap<usize, usize>>> = OnceLock::new();
    P.get_or_init(Default::default)
}

/// The ordered pairs of emulated devices whose peer access was enabled, in the order it was.
fn peers() -> &'static Mutex<Vec<(usize, usize)>> {
    static P: OnceLock<Mutex<Vec<(usize, usize)>>> = OnceLock::new();
    P.get_or_init(Default::default)
}

/// The ordered pairs `(from, to)` of emulated devices whose copies were given peer access, in
/// the order the backend asked. Every pair of emulated devices can access each other, and a
/// peer copy before that is refused: a test sees that the backend enables it first.
pub fn peer_access_enabled() -> Vec<(usize, usize)> {
    lock(peers()).clone()
}

/// How many times the host has waited for an emulated device's queued work in this process (a
/// `synchronize`, an event waited for, a copy into pageable memory, a segment released): a test
/// takes two and subtracts to count the waits some code costs (polls that do not block are not
/// counted).
pub fn host_waits() -> u64 {
    stream::host_waits()
}

/// How many events emulated devices have made and not yet destroyed in this process (a CUDA
/// event is a driver resource: a test sees that what makes them destroys them).
pub fn live_events() -> u64 {
    stream::live_events()
}

/// Launches queued on emulated devices in this process, by kernel name.
fn launched() -> &'static Mutex<BTreeMap<String, u64>> {
    static L: OnceLock<Mutex<BTreeMap<String, u64>>> = OnceLock::new();
    L.get_or_init(Default::default)
}

/// How many launches of kernel `name` (`index_select_b8`) emulated devices have queued in this
/// process: a test counts the kernels an op costs.
pub fn launches(name: &str) -> u64 {
    lock(launched()).get(name).copied().unwrap_or(0)
}

/// Every launch emulated devices have queued in this process, by kernel name, cuBLAS's GEMMs
/// as `gemm`: a test takes two and subtracts to count what a step costs.
pub fn launch_counts() -> BTreeMap<String, u64> {
    lock(launched()).clone()
}

fn is_pinned(ptr: usize, len: usize) -> bool {
    let map = lock(pinned());
    map.range(..=ptr)
        .next_back()
        .is_some_and(|(&start, &size)| ptr + len <= start + size)
}

const PAGE: usize = 4096;

fn host_layout(bytes: usize) -> std::alloc::Layout {
    std::alloc::Layout::from_size_align(bytes.max(1), PAGE).expect("a valid host layout")
}

/// Addresses moved into queued work (raw pointers are not `Send`).
#[derive(Clone, Copy)]
struct Addr(usize);

/// Copies `len` bytes on `engine`, waiting for it if another stream's copy holds it; the caller
/// vouches for both ranges.
fn memcpy(
    engines: &[Mutex<()>; 2],
    engine: Engine,
    dst: Addr,
    src: Addr,
    len: usize,
) -> Result<(), String> {
    let _engine = lock(&engines[engine as usize]);
    if len > 0 {
        // SAFETY: see the callers: live, non-overlapping ranges of `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.0 as *const u8, dst.0 as *mut u8, len) };
    }
    Ok(())
}

impl EmulatedDriver {
    pub(crate) fn new(index: usize, capacity: usize) -> EmulatedDriver {
        let failure = DeviceFailure::default();
        EmulatedDriver {
            index,
            streams: Mutex::new(vec![
                Stream::start(format!("placelab-emulated-cuda{index}"), failure.clone())
                    .expect("the emulated device's default stream's worker thread starts"),
            ]),
            failure,
            streams_asked: AtomicU64::new(0),
            engines: Arc::default(),
            memory: Mutex::new(HostMemory::simulated(capacity)),
        }
    }

    /// Stream `id` of this device.
    fn stream_of(&self, id: StreamId) -> DriverResult<Arc<Stream>> {
        lock(&self.streams)
            .get(id as usize)
            .cloned()
            .ok_or(DriverError::NoSuchStream(id))
    }

    /// The stream the calling thread queues this device's work on (`current_stream`).
    fn stream(&self) -> DriverResult<Arc<Stream>> {
        self.stream_of(current(Device::Cuda(self.index)))
    }

    fn all_streams(&self) -> Vec<Arc<Stream>> {
        lock(&self.streams).clone()
    }

    /// A side stream, running beside the others, from the device's pool (`pool_slot`); its
    /// number.
    pub(crate) fn new_stream(&self) -> DriverResult<StreamId> {
        let id = pool_slot(self.streams_asked.fetch_add(1, Ordering::Relaxed));
        let mut streams = lock(&self.streams);
        // Callers at once may come in either order: make every stream up to this one.
        while streams.len() <= id as usize {
            let name = format!("placelab-emulated-cuda{}-s{}", self.index, streams.len());
            let stream = Stream::start(name, self.failure.clone()).map_err(|e| {
                DriverError::Emulator(format!("the stream's worker thread did not start: {e}"))
            })?;
            streams.push(stream);
        }
        Ok(id)
    }

    /// Holds stream `id` until the `Hold` is dropped (`stream::Stream::hold`).
    pub(crate) fn hold(&self, id: StreamId) -> DriverResult<Hold> {
        self.stream_of(id)?.hold().map_err(DriverError::Emulator)
    }

    /// Under AddressSanitizer (`checks_bounds`): marks a block of this device as a tensor's
    /// (`usable`) or as freed, in its stream's order, as a GPU's caching allocator reuses
    /// memory: a kernel queued before the block was freed may still use it, and one queued after
    /// it was allocated again may use it from then on. Without ASan it does nothing.
    pub(crate) fn mark_block(&self, addr: usize, size: usize, usable: bool, stream: StreamId) {
        if size == 0 || !checks_bounds() {
            return;
        }
        let Ok(stream) = self.stream_of(stream) else {
            return;
        };
        let _ = stream.enqueue(Box::new(move || {
            mark_usable(addr, size, usable);
            Ok(())
        }));
    }

    /// The device's number (`cuda:index`).
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    pub(crate) fn name(&self) -> DriverResult<String> {
        Ok("emulated GPU (kernels/*.cu on the CPU)".into())
    }

    pub(crate) fn compute_capability(&self) -> (i32, i32) {
        EMULATED_CC
    }

    pub(crate) fn malloc(&self, bytes: usize) -> DriverResult<u64> {
        let addr = lock(&self.memory)
            .alloc(bytes)
            .ok_or(DriverError::OutOfMemory)?;
        // Under ASan no kernel may touch a segment until a tensor's block is carved from it.
        mark_usable(addr, bytes, false);
        Ok(addr as u64)
    }

    pub(crate) unsafe fn free(&self, ptr: u64, bytes: usize) {
        // A kernel still queued on any stream may use the segment.
        let _ = self.synchronize();
        mark_usable(ptr as usize, bytes, true);
        lock(&self.memory).free(ptr as usize, bytes);
    }

    pub(crate) fn mem_info(&self) -> (usize, usize) {
        lock(&self.memory).mem_info()
    }

    pub(crate) fn malloc_host(&self, bytes: usize) -> DriverResult<*mut u8> {
        // SAFETY: a non-zero size with a valid alignment.
        let p = unsafe { std::alloc::alloc(host_layout(bytes)) };
        if p.is_null() {
            return Err(DriverError::OutOfMemory);
        }
        lock(pinned()).insert(p as usize, bytes.max(1));
        Ok(p)
    }

    pub(crate) unsafe fn free_host(&self, ptr: *mut u8, bytes: usize) {
        lock(pinned()).remove(&(ptr as usize));
        // SAFETY: allocated by `malloc_host` with this layout.
        unsafe { std::alloc::dealloc(ptr, host_layout(bytes)) };
    }

    pub(crate) unsafe fn copy_htod(&self, dst: u64, src: &[u8]) -> DriverResult<()> {
        let (dst, len, engines) = (Addr(dst as usize), src.len(), self.engines.clone());
        let stream = self.stream()?;
        if is_pinned(src.as_ptr() as usize, len) {
            let src = Addr(src.as_ptr() as usize);
            stream
                .enqueue(Box::new(move || {
                    memcpy(&engines, Engine::ToDevice, dst, src, len)
                }))
                .map_err(DriverError::Emulator)?;
        } else {
            // Pageable: staged before the call returns, so the caller may reuse `src` at once.
            let staged = src.to_vec();
            stream
                .enqueue(Box::new(move || {
                    let src = Addr(staged.as_ptr() as usize);
                    memcpy(&engines, Engine::ToDevice, dst, src, len)
                }))
                .map_err(DriverError::Emulator)?;
        }
        Ok(())
    }

    pub(crate) unsafe fn copy_dtoh(&self, dst: &mut [u8], src: u64) -> DriverResult<()> {
        let len = dst.len();
        let pinned_dst = is_pinned(dst.as_ptr() as usize, len);
        let (dst, src) = (Addr(dst.as_mut_ptr() as usize), Addr(src as usize));
        let (stream, engines) = (self.stream()?, self.engines.clone());
        let ticket = stream
            .enqueue(Box::new(move || {
                memcpy(&engines, Engine::FromDevice, dst, src, len)
            }))
            .map_err(DriverError::Emulator)?;
        if !pinned_dst {
            // Pageable: the call returns once the bytes have arrived.
            stream.wait_for(ticket).map_err(DriverError::Emulator)?;
        }
        Ok(())
    }

    pub(crate) unsafe fn copy_peer(
        &self,
        to: &EmulatedDriver,
        dst: u64,
        src: u64,
        bytes: usize,
    ) -> DriverResult<()> {
        if !lock(peers()).contains(&(self.index, to.index)) {
            return Err(DriverError::Emulator(format!(
                "a copy from cuda:{} to cuda:{} before peer access between them was enabled (a GPU would stage it through host memory)",
                self.index, to.index
            )));
        }
        let (dst, src, engines) = (Addr(dst as usize), Addr(src as usize), self.engines.clone());
        self.stream()?
            .enqueue(Box::new(move || {
                memcpy(&engines, Engine::FromDevice, dst, src, bytes)
            }))
            .map_err(DriverError::Emulator)?;
        Ok(())
    }

    pub(crate) fn enable_peer_access(&self, to: &EmulatedDriver) -> DriverResult<bool> {
        let mut p = lock(peers());
        if !p.contains(&(self.index, to.index)) {
            p.push((self.index, to.index));
        }
        Ok(true)
    }

    pub(crate) fn new_event(&self) -> DriverResult<EmulatedEvent> {
        Ok(EmulatedEvent::default())
    }

    pub(crate) fn record_on(&self, event: &EmulatedEvent, stream: StreamId) -> DriverResult<()> {
        event
            .record_on(&self.stream_of(stream)?)
            .map_err(DriverError::Emulator)
    }

    pub(crate) fn wait_event_on(
        &self,
        stream: StreamId,
        event: &EmulatedEvent,
    ) -> DriverResult<()> {
        let stream = self.stream_of(stream)?;
        stream::wait_event(&stream, event).map_err(DriverError::Emulator)
    }

    /// Waits for the work queued on every stream of the device, all of it even when one has
    /// failed (a segment is released after this), then reports the first failure.
    pub(crate) fn synchronize(&self) -> DriverResult<()> {
        let waited: Vec<_> = self.all_streams().iter().map(|s| s.synchronize()).collect();
        waited
            .into_iter()
            .collect::<Result<(), String>>()
            .map_err(DriverError::Emulator)
    }

    pub(crate) fn stream_is_idle(&self, stream: StreamId) -> DriverResult<bool> {
        Ok(self.stream_of(stream)?.is_idle())
    }

    /// How many streams the device has made, the default one included.
    pub(crate) fn stream_count(&self) -> usize {
        lock(&self.streams).len()
    }

    pub(crate) unsafe fn launch(
        &self,
        _source: &KernelSource,
        name: &str,
        grid: Grid,
        args: &[Arg],
    ) -> DriverResult<()> {
        let kernel = kernels::check_launch(name, grid, args).map_err(DriverError::Emulator)?;
        *lock(launched()).entry(name.to_string()).or_default() += 1;
        let (name, args) = (name.to_string(), args.to_vec());
        // SAFETY: the caller vouches for the pointers; the stream runs the kernel after the
        // work queued before it, as a GPU's stream does.
        self.stream()?
            .enqueue(Box::new(move || unsafe {
                kernels::run(&name, kernel, grid, args)
            }))
            .map_err(DriverError::Emulator)?;
        Ok(())
    }

    pub(crate) unsafe fn gemm(&self, call: &Gemm, _workspace: (u64, usize)) -> DriverResult<()> {
        let call = *call;
        *lock(launched()).entry("gemm".to_string()).or_default() += 1;
        if !matches!(
            call.dtype,
            DType::F32 | DType::F64 | DType::F16 | DType::BF16
        ) {
            return Err(DriverError::Emulator(format!(
                "cuBLAS has no {} GEMM",
                call.dtype
            )));
        }
        // SAFETY: the caller vouches for the operands; the stream orders the product after the
        // kernels that wrote them.
        self.stream()?
            .enqueue(Box::new(move || unsafe { host_gemm(&call) }))
            .map_err(DriverError::Emulator)?;
        Ok(())
    }
}

/// One operand of a column-major batched GEMM read as a row-major matrix for the CPU's matmul:
/// its elements (as f32 for half types), each batch's offset into them, and (row, col) strides.
struct HostOperand<T> {
    data: Vec<T>,
    offsets: Vec<usize>,
    strides: (usize, usize),
}

impl<T> HostOperand<T> {
    fn operand(&self) -> Operand<'_, T> {
        Operand {
            data: &self.data,
            offsets: &self.offsets,
            row_stride: self.strides.0,
            col_stride: self.strides.1,
        }
    }
}

/// Reads `rows × cols` matrices at `ptr` (`batch` of them, `stride` elements apart) whose
/// element (r, c) is at `r * rs + c * cs`, converting each element with `load`.
///
/// # Safety
/// `ptr` addresses every element those offsets reach.
unsafe fn read_operand<S: Copy, T>(
    ptr: u64,
    (rows, cols): (usize, usize),
    (rs, cs): (usize, usize),
    (batch, stride): (usize, i64),
    load: impl Fn(S) -> T,
) -> HostOperand<T> {
    let last = (batch as i64 - 1) * stride;
    let lo = last.min(0);
    let span = (last - lo) as usize + (rows - 1) * rs + (cols - 1) * cs + 1;
    let base = (ptr as *const S).wrapping_offset(lo as isize);
    // SAFETY: the caller vouches for `span` elements from the lowest batch's start.
    let raw = unsafe { std::slice::from_raw_parts(base, span) };
    HostOperand {
        data: raw.iter().map(|&x| load(x)).collect(),
        offsets: (0..batch)
            .map(|i| (i as i64 * stride - lo) as usize)
            .collect(),
        strides: (rs, cs),
    }
}

/// `call` on the CPU: computes each `Cᵀ = op(B)ᵀ · op(A)ᵀ` row-major (that is `C` column-major)
/// with the CPU backend's matmul, then stores it at `C` with its leading dimension.
///
/// # Safety
/// As `Driver::gemm`.
unsafe fn host_gemm(c: &Gemm) -> Result<(), String> {
    match c.dtype {
        DType::F32 => unsafe { gemm_as::<f32, f32>(c, |x| x, |x| x) },
        DType::F64 => unsafe { gemm_as::<f64, f64>(c, |x| x, |x| x) },
        DType::F16 => unsafe {
            gemm_as::<half::f16, f32>(c, half::f16::to_f32, half::f16::from_f32)
        },
        DType::BF16 => unsafe {
            gemm_as::<half::bf16, f32>(c, half::bf16::to_f32, half::bf16::from_f32)
        },
        d => return Err(format!("cuBLAS has no {d} GEMM")),
    }
    Ok(())
}

/// `host_gemm` for elements `S` stored on the device and multiplied as `T`.
unsafe fn gemm_as<S: Copy, T: Matmul>(c: &Gemm, load: fn(S) -> T, store: fn(T) -> S) {
    let (m, n, k) = (c.m, c.n, c.k);
    // op(B)ᵀ is n × k, op(A)ᵀ is k × m: (row, col) strides of each as stored column-major.
    let b_strides = if c.trans_b { (1, c.ldb) } else { (c.ldb, 1) };
    let a_strides = if c.trans_a { (1, c.lda) } else { (c.lda, 1) };
    let lhs = unsafe { read_operand(c.b, (n, k), b_strides, (c.batch, c.stride_b), load) };
    let rhs = unsafe { read_operand(c.a, (k, m), a_strides, (c.batch, c.stride_a), load) };
    let dst = c.c as *mut S;
    // C as the CPU's matmul writes it (row-major n × m per batch), read in when added onto.
    let at = |b: usize, j: usize, i: usize| b as i64 * c.stride_c + (i + j * c.ldc) as i64;
    let mut out = vec![T::zero(); c.batch * m * n];
    if c.accumulate {
        for b in 0..c.batch {
            for j in 0..n {
                for i in 0..m {
                    // SAFETY: the caller vouches for C's extent.
                    out[(b * n + j) * m + i] = load(unsafe { *dst.offset(at(b, j, i) as isize) });
                }
            }
        }
    }
    if c.bias != 0 {
        // cuBLASLt's bias epilogue: element i of the bias in row i of every column, in the
        // compute type, before the product is added (one rounding, as on a GPU).
        let bias = c.bias as *const S;
        for j in 0..n {
            for i in 0..m {
                // SAFETY: the caller vouches for the bias's `m` elements.
                out[j * m + i] = load(unsafe { *bias.add(i) });
            }
        }
    }
    T::matmul(
        &lhs.operand(),
        &rhs.operand(),
        (n, m, k),
        c.accumulate || c.bias != 0,
        &mut out,
    );
    for b in 0..c.batch {
        for j in 0..n {
            for i in 0..m {
                // SAFETY: the caller vouches for C's extent.
                unsafe { *dst.offset(at(b, j, i) as isize) = store(out[(b * n + j) * m + i]) };
            }
        }
    }
}
