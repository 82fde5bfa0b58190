//! The bytes of a tensor, on some backend. This is the only place that matches on the backend:
//! every op the tensor layer needs is one function here that sends host-backed storages (the CPU
//! and simulated CUDA devices) to the `cpu` kernels and GPU storages to the `cuda` kernels.
//! Copies to other devices are in `transfer.rs`.

mod transfer;

use std::sync::{Arc, Mutex};

use half::f16;

use crate::cpu::elementwise::{self as ew, BinaryOp, CmpOp, UnaryOp};
use crate::cpu::{self, matmul::Matmul, reduce};

use crate::cuda::copy::PinnedHost;
use crate::cuda::{blas, ops};
use crate::inflight::InFlight;
use crate::layout::Layout;
use crate::memory::Block;
use crate::{DType, Device, Element, Result, Scalar};

pub(crate) enum Backing {
    /// Host memory from the device's caching allocator: the CPU, or a simulated GPU.
    Host(Block),
    /// Memory of a real GPU from its caching allocator (the block's address is a device pointer).
    Cuda(Block),
    /// Page-locked host memory for a real GPU's copy engine (`pin_memory()`).
    Pinned(PinnedHost),
}

pub(crate) struct Storage {
    dtype: DType,
    numel: usize,
    /// Page-locked host memory (`pin_memory()`): transfers from it are recorded as pinned.
    pub(crate) pinned: bool,
    backing: Backing,
    /// Non-blocking copies that read or write these bytes and may still be running.
    in_flight: Mutex<Vec<Arc<InFlight>>>,
}

impl Drop for Storage {
    fn drop(&mut self) {
        // A copy engine or a copy thread may still be using the memory.
        for f in self
            .in_flight
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = f.wait();
        }
    }
}

/// Binds `$t` to the Rust type of `$dtype` for the dtypes with native arithmetic kernels;
/// f16/bf16 are computed in f32 by the tensor layer and never reach these kernels.
macro_rules! with_arith {
    ($dtype:expr, $t:ident, $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::F64 => {
                type $t = f64;
                $body
            }
            DType::I64 => {
                type $t = i64;
                $body
            }
            DType::I32 => {
                type $t = i32;
                $body
            }
            DType::U8 => {
                type $t = u8;
                $body
            }
            DType::Bool => {
                type $t = bool;
                $body
            }
            DType::F16 | DType::BF16 => unreachable!("f16/bf16 arithmetic runs in f32"),
        }
    };
}

macro_rules! with_float {
    ($dtype:expr, $t:ident, $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::F64 => {
                type $t = f64;
                $body
            }
            d => unreachable!("{d} has no native float kernel"),
        }
    };
}

fn gpu_index(device: Device) -> usize {
    device.index().expect("a GPU device has an index")
}

impl Storage {
    fn new(dtype: DType, numel: usize, pinned: bool, backing: Backing) -> Storage {
        Storage {
            dtype,
            numel,
            pinned,
            backing,
            in_flight: Mutex::default(),
        }
    }

    /// A storage of `numel` elements whose contents are unspecified (bool storages are zeroed,
    /// since not every byte is a valid `bool`).
    pub(crate) fn alloc(device: Device, dtype: DType, numel: usize) -> Result<Storage> {
        let block = Block::alloc(device, dtype, numel)?;
        if crate::cuda::is_real(device) {
            return Ok(Storage::new(dtype, numel, false, Backing::Cuda(block)));
        }
        let mut s = Storage::new(dtype, numel, false, Backing::Host(block));
        if dtype == DType::Bool {
            cpu::fill(s.bytes_mut(), 0u8);
        }
        Ok(s)
    }

    /// A CPU storage in page-locked memory from the CUDA driver (a real GPU must exist).
    pub(crate) fn alloc_pinned(dtype: DType, numel: usize) -> Result<Storage> {
        let bytes = numel * dtype.size_in_bytes();
        let mut s = Storage::new(
            dtype,
            numel,
            true,
            Backing::Pinned(PinnedHost::alloc(bytes)?),
        );
        if dtype == DType::Bool {
            cpu::fill(s.bytes_mut(), 0u8);
        }
        Ok(s)
    }

    pub(crate) fn device(&self) -> Device {
        match &self.backing {
            Backing::Host(b) | Backing::Cuda(b) => b.device(),
            Backing::Pinned(_) => Device::Cpu,
        }
    }

    /// Whether the bytes are in host memory (readable without a device copy).
    pub(crate) fn is_host(&self) -> bool {
        !matches!(self.backing, Backing::Cuda(_))
    }

    /// The device address of a real GPU's storage, as kernels and cuBLAS take it.
    pub(crate) fn device_ptr(&self) -> u64 {
        match &self.backing {
            Backing::Cuda(b) => b.ptr() as u64,
            _ => unreachable!("a host storage has no device pointer"),
        }
    }

    /// The start of a host-backed storage's bytes, once no copy is using them.
    fn host_ptr(&self) -> *mut u8 {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        for f in in_flight.drain(..) {
            let _ = f.wait();
        }
        drop(in_flight);
        match &self.backing {
            Backing::Host(b) => b.ptr(),
            Backing::Pinned(p) => p.ptr(),
            Backing::Cuda(_) => {
                unreachable!("GPU memory is read through a copy (`Tensor::host_readable`)")
            }
        }
    }

    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }

    pub(crate) fn numel(&self) -> usize {
        self.numel
    }

    /// The allocator's id of this storage (its key in the memory ledger).
    pub(crate) fn id(&self) -> u64 {
        match &self.backing {
            Backing::Host(b) | Backing::Cuda(b) => b.id(),
            Backing::Pinned(p) => p.ptr() as u64,
        }
    }

    /// Bytes of the block this storage holds (rounded up by the allocator).
    pub(crate) fn block_bytes(&self) -> usize {
        match &self.backing {
            Backing::Host(b) | Backing::Cuda(b) => b.size(),
            Backing::Pinned(p) => p.bytes(),
        }
    }

    pub(crate) fn slice<T: Element>(&self) -> &[T] {
        cpu::check_dtype::<T>(self.dtype);
        // SAFETY: host memory holding `numel` elements of this dtype, aligned to 512 bytes (or
        // a page, when pinned).
        unsafe { std::slice::from_raw_parts(self.host_ptr() as *const T, self.numel) }
    }

    pub(crate) fn slice_mut<T: Element>(&mut self) -> &mut [T] {
        cpu::check_dtype::<T>(self.dtype);
        // SAFETY: as in `slice`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.host_ptr() as *mut T, self.numel) }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        let n = self.numel * self.dtype.size_in_bytes();
        // SAFETY: the host memory holds at least `n` bytes.
        unsafe { std::slice::from_raw_parts(self.host_ptr(), n) }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        let n = self.numel * self.dtype.size_in_bytes();
        // SAFETY: the host memory holds at least `n` bytes; access is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.host_ptr(), n) }
    }

    /// A storage holding `values` (uploaded when `device` is a GPU).
    pub(crate) fn from_slice<T: Element>(device: Device, values: &[T]) -> Result<Storage> {
        let mut s = Storage::alloc(device.host_stand_in(), T::DTYPE, values.len())?;
        s.slice_mut::<T>().copy_from_slice(values);
        s.moved_to(device)
    }

    /// `numel` copies of `value`, converted to `dtype`.
    pub(crate) fn full(
        device: Device,
        dtype: DType,
        numel: usize,
        value: Scalar,
    ) -> Result<Storage> {
        let mut s = Storage::alloc(device, dtype, numel)?;
        if !s.is_host() {
            ops::fill(&s, value)?;
            return Ok(s);
        }
        crate::with_dtype!(
            dtype,
            T,
            cpu::fill(s.slice_mut::<T>(), value.to_element::<T>())
        );
        Ok(s)
    }

    /// A contiguous copy of the view `l`, converted to `dtype`.
    pub(crate) fn copy_as(&self, l: &Layout, dtype: DType) -> Result<Storage> {
        if !self.is_host() {
            return ops::cast(self, l, dtype);
        }
        let mut out = Storage::alloc(self.device(), dtype, l.numel())?;
        crate::with_dtype!(self.dtype, S, {
            let src = self.slice::<S>();
            crate::with_dtype!(dtype, D, cpu::cast::<S, D>(src, l, out.slice_mut::<D>()))
        });
        Ok(out)
    }

    /// Writes the view `ls` of `src` into the view `ld` of `self` (same shape and dtype).
    pub(crate) fn write_view(&mut self, ld: &Layout, src: &Storage, ls: &Layout) -> Result<()> {
        if !self.is_host() {
            return ops::write_view(self, ld, src, ls);
        }
        crate::with_dtype!(
            self.dtype,
            T,
            cpu::copy_strided(src.slice::<T>(), ls, self.slice_mut::<T>(), ld)
        );
        Ok(())
    }

    /// Overwrites the view `ld` of a storage that other tensors may share (in-place updates:
    /// optimizer steps). `src` must not overlap `self`.
    ///
    /// # Safety
    /// No other thread may read or write this storage during the call, and no slice of it may be
    /// alive: the engine calls this only from `Tensor::assign_`, outside any kernel.
    pub(crate) unsafe fn write_view_shared(
        &self,
        ld: &Layout,
        src: &Storage,
        ls: &Layout,
    ) -> Result<()> {
        if !self.is_host() {
            return ops::write_view(self, ld, src, ls);
        }
        let ptr = self.host_ptr();
        let bytes = self.numel * self.dtype.size_in_bytes();
        crate::with_dtype!(self.dtype, T, {
            // SAFETY: the caller guarantees exclusive access; the block holds `numel` elements.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(ptr as *mut T, bytes / self.dtype.size_in_bytes())
            };
            cpu::copy_strided(src.slice::<T>(), ls, dst, ld)
        });
        Ok(())
    }

    pub(crate) fn binary(
        op: BinaryOp,
        a: &Storage,
        la: &Layout,
        b: &Storage,
        lb: &Layout,
    ) -> Result<Storage> {
        if !a.is_host() {
            return ops::binary(op, a, la, b, lb);
        }
        let mut out = Storage::alloc(a.device(), a.dtype, la.numel())?;
        with_arith!(
            a.dtype,
            T,
            ew::binary::<T>(op, a.slice(), la, b.slice(), lb, out.slice_mut())
        );
        Ok(out)
    }

    pub(crate) fn compare(
        op: CmpOp,
        a: &Storage,
        la: &Layout,
        b: &Storage,
        lb: &Layout,
    ) -> Result<Storage> {
        if !a.is_host() {
            return ops::compare(op, a, la, b, lb);
        }
        let mut out = Storage::alloc(a.device(), DType::Bool, la.numel())?;
        crate::with_dtype!(
            a.dtype,
            T,
            ew::compare::<T>(op, a.slice(), la, b.slice(), lb, out.slice_mut())
        );
        Ok(out)
    }

    /// `a op number` (`number op a` when `reverse`) for an f16/bf16 storage of a real GPU, the
    /// number kept in f32 (host storages compute half precision in f32 throughout).
    pub(crate) fn binary_number(
        op: BinaryOp,
        a: &Storage,
        la: &Layout,
        number: f32,
        reverse: bool,
    ) -> Result<Storage> {
        debug_assert!(!a.is_host(), "host storages take the f32 path");
        ops::binary_number(op, a, la, number, reverse)
    }

    /// `a op number` for an f16/bf16 storage of a real GPU, compared in f32.
    pub(crate) fn compare_number(
        op: CmpOp,
        a: &Storage,
        la: &Layout,
        number: f32,
    ) -> Result<Storage> {
        debug_assert!(!a.is_host(), "host storages take the f32 path");
        ops::compare_number(op, a, la, number)
    }

    pub(crate) fn unary(&self, op: UnaryOp, l: &Layout) -> Result<Storage> {
        if !self.is_host() {
            return ops::unary(op, self, l);
        }
        let mut out = Storage::alloc(self.device(), self.dtype, l.numel())?;
        if op.keeps_ints() {
            with_arith!(
                self.dtype,
                T,
                ew::unary_arith::<T>(op, self.slice(), l, out.slice_mut())
            );
        } else {
            with_float!(
                self.dtype,
                T,
                ew::unary_float::<T>(op, self.slice(), l, out.slice_mut())
            );
        }
        Ok(out)
    }

    pub(crate) fn clamp(
        &self,
        l: &Layout,
        lo: Option<Scalar>,
        hi: Option<Scalar>,
    ) -> Result<Storage> {
        if !self.is_host() {
            return ops::clamp(self, l, lo, hi);
        }
        let mut out = Storage::alloc(self.device(), self.dtype, l.numel())?;
        with_arith!(self.dtype, T, {
            let (lo, hi) = (
                lo.map(|s| s.to_element::<T>()),
                hi.map(|s| s.to_element::<T>()),
            );
            ew::clamp::<T>(self.slice(), l, lo, hi, out.slice_mut())
        });
        Ok(out)
    }

    pub(crate) fn where_(
        c: (&Storage, &Layout),
        a: (&Storage, &Layout),
        b: (&Storage, &Layout),
    ) -> Result<Storage> {
        if !a.0.is_host() {
            return ops::where_(c, a, b);
        }
        let mut out = Storage::alloc(a.0.device(), a.0.dtype, a.1.numel())?;
        crate::with_dtype!(a.0.dtype, T, {
            ew::where_::<T>(
                (c.0.slice(), c.1),
                (a.0.slice(), a.1),
                (b.0.slice(), b.1),
                out.slice_mut(),
            )
        });
        Ok(out)
    }

    /// Sums (or means) of `rows` contiguous rows of `len` elements; dtype f32, f64 or i64.
    pub(crate) fn sum_rows(&self, rows: usize, len: usize, mean: bool) -> Result<Storage> {
        if !self.is_host() {
            return ops::sum_rows(self, rows, len, mean);
        }
        let mut out = Storage::alloc(self.device(), self.dtype, rows)?;
        match self.dtype {
            DType::F32 => reduce::sum_rows::<f32>(self.slice(), len, mean, out.slice_mut()),
            DType::F64 => reduce::sum_rows::<f64>(self.slice(), len, mean, out.slice_mut()),
            DType::I64 => reduce::sum_rows::<i64>(self.slice(), len, mean, out.slice_mut()),
            d => unreachable!("sum over {d} runs in a wider dtype"),
        }
        Ok(out)
    }

    /// Per-row max (or min) values and their i64 indices.
    pub(crate) fn extreme_rows(
        &self,
        rows: usize,
        len: usize,
        greater: bool,
    ) -> Result<(Storage, Storage)> {
        if !self.is_host() {
            return ops::extreme_rows(self, rows, len, greater);
        }
        let mut values = Storage::alloc(self.device(), self.dtype, rows)?;
        let mut indices = Storage::alloc(self.device(), DType::I64, rows)?;
        crate::with_dtype!(self.dtype, T, {
            reduce::extreme_rows::<T>(
                self.slice(),
                len,
                greater,
                values.slice_mut(),
                indices.slice_mut(),
            )
        });
        Ok((values, indices))
    }

    pub(crate) fn softmax_rows(&self, len: usize, log: bool) -> Result<Storage> {
        if !self.is_host() {
            return ops::softmax_rows(self, len, log);
        }
        let mut out = Storage::alloc(self.device(), self.dtype, self.numel)?;
        with_float!(
            self.dtype,
            T,
            reduce::softmax_rows::<T>(self.slice(), len, log, out.slice_mut())
        );
        Ok(out)
    }

    /// Batched `a · b` into a contiguous `batch × m × n` storage. `a_off`/`b_off` give each
    /// batch's matrix offset; `(rs, cs)` are row and column strides.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn matmul(
        a: &Storage,
        a_off: &[usize],
        (a_rs, a_cs): (usize, usize),
        b: &Storage,
        b_off: &[usize],
        (b_rs, b_cs): (usize, usize),
        (m, n, k): (usize, usize, usize),
    ) -> Result<Storage> {
        if !a.is_host() {
            return blas::matmul(a, a_off, (a_rs, a_cs), b, b_off, (b_rs, b_cs), (m, n, k));
        }
        let mut out = Storage::alloc(a.device(), a.dtype, a_off.len() * m * n)?;
        fn run<T: Matmul>(
            a: &Storage,
            ao: &[usize],
            ars: (usize, usize),
            b: &Storage,
            bo: &[usize],
            brs: (usize, usize),
            mnk: (usize, usize, usize),
            out: &mut Storage,
        ) {
            let a = cpu::matmul::Operand {
                data: a.slice::<T>(),
                offsets: ao,
                row_stride: ars.0,
                col_stride: ars.1,
            };
            let b = cpu::matmul::Operand {
                data: b.slice::<T>(),
                offsets: bo,
                row_stride: brs.0,
                col_stride: brs.1,
            };
            T::matmul(&a, &b, mnk.0, mnk.1, mnk.2, out.slice_mut::<T>());
        }
        let args = (a, a_off, (a_rs, a_cs), b, b_off, (b_rs, b_cs), (m, n, k));
        match a.dtype {
            DType::F32 => run::<f32>(
                args.0, args.1, args.2, args.3, args.4, args.5, args.6, &mut out,
            ),
            DType::F64 => run::<f64>(
                args.0, args.1, args.2, args.3, args.4, args.5, args.6, &mut out,
            ),
            DType::F16 => run::<f16>(
                args.0, args.1, args.2, args.3, args.4, args.5, args.6, &mut out,
            ),
            DType::I64 => run::<i64>(
                args.0, args.1, args.2, args.3, args.4, args.5, args.6, &mut out,
            ),
            DType::I32 => run::<i32>(
                args.0, args.1, args.2, args.3, args.4, args.5, args.6, &mut out,
            ),
            DType::U8 => run::<u8>(
                args.0, args.1, args.2, args.3, args.4, args.5, args.6, &mut out,
            ),
            d @ (DType::BF16 | DType::Bool) => unreachable!("matmul of {d} runs in another dtype"),
        }
        Ok(out)
    }

    /// The values of view `l` as f64 (for previews and tests), read on the host.
    pub(crate) fn read_f64(&self, l: &Layout) -> Result<Vec<f64>> {
        let mut out = crate::memory::host_vec("to_f64_vec", l.numel(), 0.0)?;
        crate::with_dtype!(
            self.dtype,
            T,
            cpu::map1(self.slice::<T>(), l, &mut out, |x: T| x.to_f64())
        );
        Ok(out)
    }

    /// The elements at the given storage offsets, as f64 (for previews).
    pub(crate) fn read_f64_at(&self, offsets: &[usize]) -> Vec<f64> {
        crate::with_dtype!(self.dtype, T, {
            let s = self.slice::<T>();
            offsets.iter().map(|&o| s[o].to_f64()).collect()
        })
    }
}
