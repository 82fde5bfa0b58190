//! Each op the tensor layer needs, once: on host memory it runs the `cpu` kernels, on a real GPU
//! the CUDA backend's (`gpu::ops`), into a buffer allocated here. Matrix products are in
//! `matmul.rs`, reductions in `reduce.rs`.

use super::Storage;
use crate::backend::cpu;
use crate::backend::cpu::elementwise as ew;
use crate::backend::gpu::{blas, ops as gpu};
use crate::base::dtype::{DType, Element, Scalar};
use crate::base::op::{BinaryOp, CmpOp, Op, UnaryOp};
use crate::device::Device;
use crate::device::error::Result;
use crate::device::layout::Layout;
use crate::profile::Work;

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

impl Storage {
    /// Whether `device`'s kernels take f16/bf16 directly (a GPU's, real or emulated, computing
    /// in f32 inside); host kernels get f16/bf16 values cast to f32 and back by the tensor layer.
    pub(crate) fn computes_half_natively(device: Device) -> bool {
        device
            .kind()
            .is_ok_and(crate::device::DeviceKind::runs_gpu_backend)
    }

    /// Whether `device` multiplies matrices of `dtype`. CUDA devices refuse what cuBLAS refuses
    /// (simulated ones too, so a lesson behaves the same on both).
    pub(crate) fn check_matmul_dtype(device: Device, dtype: DType) -> Result<()> {
        if device.is_cuda() {
            blas::check_dtype(dtype)?;
        }
        Ok(())
    }

    /// `count` values `start + i · step` of `dtype` on `device` (`arange`), written in the
    /// device's memory (or its host stand-in) through the allocator, so an absurd length is an
    /// `OutOfMemory` error before any value is written, then moved to a GPU.
    pub(crate) fn arange(
        device: Device,
        dtype: DType,
        count: usize,
        steps: super::Steps,
    ) -> Result<Storage> {
        let mut st = Storage::alloc(device.host_side(), dtype, count)?;
        crate::with_dtype!(dtype, T, ew::arange(st.slice_mut::<T>(), steps));
        st.moved_to(device)
    }

    /// `numel` copies of `value`, converted to `dtype`.
    pub(crate) fn full(
        device: Device,
        dtype: DType,
        numel: usize,
        value: Scalar,
    ) -> Result<Storage> {
        let bytes = (numel * dtype.size_in_bytes()) as u64;
        let _op = super::profiled(
            device,
            Op::Fill,
            Work::Kernel {
                bytes,
                flops: 0,
                dtype,
            },
        );
        let mut s = Storage::alloc(device, dtype, numel)?;
        match s.gpu() {
            Some(g) => gpu::fill(&*g?, dtype, s.device_ptr(), numel, value)?,
            None => crate::with_dtype!(
                dtype,
                T,
                cpu::fill(s.slice_mut::<T>(), value.to_element::<T>())
            ),
        }
        Ok(s)
    }

    /// A contiguous copy of the view `l`, converted to `dtype`.
    pub(crate) fn copy_as(&self, l: &Layout, dtype: DType) -> Result<Storage> {
        let (name, work) = match dtype == self.dtype {
            // `write_view` prices the copy's kernel: priced here too, it would count twice.
            true => (Op::Copy, Work::Unpriced),
            false => (Op::Cast, Work::elementwise(l.numel(), 1, dtype)),
        };
        let _op = self.profiled(name, work);
        if dtype == self.dtype {
            // The same dtype moves bits: a cast through f64 would quiet signalling NaNs (and
            // cost a GPU 64-bit arithmetic per element).
            let mut out = Storage::alloc(self.device(), dtype, l.numel())?;
            out.write_view(&Layout::contiguous(l.shape.clone()), self, l)?;
            return Ok(out);
        }
        self.produce(
            dtype,
            l.numel(),
            |out| {
                crate::with_dtype!(self.dtype, S, {
                    let src = self.slice::<S>();
                    crate::with_dtype!(dtype, D, cpu::cast::<S, D>(src, l, out.slice_mut::<D>()))
                })
            },
            |g, out| gpu::cast(g, self.dtype, dtype, out, (self.device_ptr(), l)),
        )
    }

    /// Writes the view `ls` of `src` into the view `ld` of `self` (same shape and dtype).
    pub(crate) fn write_view(&mut self, ld: &Layout, src: &Storage, ls: &Layout) -> Result<()> {
        let _op = self.profiled(
            Op::CopyInPlace,
            Work::elementwise(ld.numel(), 1, self.dtype),
        );
        if let Some(g) = self.gpu() {
            let (dst, from) = ((self.device_ptr(), ld), (src.device_ptr(), ls));
            return gpu::write_view(&*g?, self.dtype, dst, from);
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
        let _op = self.profiled(
            Op::CopyInPlace,
            Work::elementwise(ld.numel(), 1, self.dtype),
        );
        if let Some(g) = self.gpu() {
            // Ordered on the device's stream like every other op.
            let (dst, from) = ((self.device_ptr(), ld), (src.device_ptr(), ls));
            return gpu::write_view(&*g?, self.dtype, dst, from);
        }
        let ptr = self.host_ptr();
        crate::with_dtype!(self.dtype, T, {
            // SAFETY: the caller guarantees exclusive access; the block holds `numel` elements.
            let dst = unsafe { std::slice::from_raw_parts_mut(ptr as *mut T, self.numel) };
            cpu::copy_strided(src.slice::<T>(), ls, dst, ld)
        });
        Ok(())
    }

    /// `self[ld] += alpha · x[lx]` in place, where it can be done in one pass: host storages of
    /// f32 or f64, both views contiguous. Returns false (nothing written) otherwise, and the
    /// caller computes it out of place.
    ///
    /// # Safety
    /// As `write_view_shared`: no other thread reads or writes this storage during the call,
    /// no slice of it is alive, and `x` does not overlap it.
    pub(crate) unsafe fn add_scaled_shared(
        &self,
        ld: &Layout,
        x: &Storage,
        lx: &Layout,
        alpha: f64,
    ) -> Result<bool> {
        let fits = self.is_host()
            && x.dtype == self.dtype
            && matches!(self.dtype, DType::F32 | DType::F64)
            && ld.is_contiguous()
            && lx.is_contiguous()
            && ld.numel() == lx.numel();
        if !fits {
            return Ok(false);
        }
        let _op = self.profiled(Op::AddInPlace, Work::elementwise(ld.numel(), 2, self.dtype));
        let (ptr, n) = (self.host_ptr(), ld.numel());
        with_float!(self.dtype, T, {
            // SAFETY: the caller guarantees exclusive access; the view lies inside the block.
            let dst = unsafe { std::slice::from_raw_parts_mut((ptr as *mut T).add(ld.offset), n) };
            let src = &x.slice::<T>()[lx.offset..lx.offset + n];
            ew::add_scaled(dst, src, alpha as T)
        });
        Ok(true)
    }

    pub(crate) fn binary(
        op: BinaryOp,
        a: &Storage,
        la: &Layout,
        b: &Storage,
        lb: &Layout,
    ) -> Result<Storage> {
        let _op = a.profiled(op.into(), Work::elementwise(la.numel(), 2, a.dtype));
        a.produce(
            a.dtype,
            la.numel(),
            |out| {
                with_arith!(
                    a.dtype,
                    T,
                    ew::binary::<T>(op, a.slice(), la, b.slice(), lb, out.slice_mut())
                )
            },
            |g, out| {
                gpu::binary(
                    g,
                    op,
                    a.dtype,
                    out,
                    (a.device_ptr(), la),
                    (b.device_ptr(), lb),
                )
            },
        )
    }

    pub(crate) fn compare(
        op: CmpOp,
        a: &Storage,
        la: &Layout,
        b: &Storage,
        lb: &Layout,
    ) -> Result<Storage> {
        let _op = a.profiled(op.into(), Work::elementwise(la.numel(), 2, a.dtype));
        a.produce(
            DType::Bool,
            la.numel(),
            |out| {
                crate::with_dtype!(
                    a.dtype,
                    T,
                    ew::compare::<T>(op, a.slice(), la, b.slice(), lb, out.slice_mut())
                )
            },
            |g, out| {
                gpu::compare(
                    g,
                    op,
                    a.dtype,
                    out,
                    (a.device_ptr(), la),
                    (b.device_ptr(), lb),
                )
            },
        )
    }

    /// `a op number` (`number op a` when `reverse`) for an f16/bf16 storage of a device that
    /// computes half precision natively, the number kept in f32.
    pub(crate) fn binary_number(
        op: BinaryOp,
        a: &Storage,
        la: &Layout,
        number: f32,
        reverse: bool,
    ) -> Result<Storage> {
        let _op = a.profiled(op.into(), Work::elementwise(la.numel(), 1, a.dtype));
        a.produce(
            a.dtype,
            la.numel(),
            |_| unreachable!("host storages compute half precision in f32"),
            |g, out| gpu::binary_number(g, op, a.dtype, out, (a.device_ptr(), la), number, reverse),
        )
    }

    /// `a op number` for an f16/bf16 storage of a device that computes half precision natively,
    /// compared in f32.
    pub(crate) fn compare_number(
        op: CmpOp,
        a: &Storage,
        la: &Layout,
        number: f32,
    ) -> Result<Storage> {
        let _op = a.profiled(op.into(), Work::elementwise(la.numel(), 1, a.dtype));
        a.produce(
            DType::Bool,
            la.numel(),
            |_| unreachable!("host storages compute half precision in f32"),
            |g, out| gpu::compare_number(g, op, a.dtype, out, (a.device_ptr(), la), number),
        )
    }

    pub(crate) fn unary(&self, op: UnaryOp, l: &Layout) -> Result<Storage> {
        let _op = self.profiled(op.into(), Work::elementwise(l.numel(), 1, self.dtype));
        self.produce(
            self.dtype,
            l.numel(),
            |out| {
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
            },
            |g, out| gpu::unary(g, op, self.dtype, out, (self.device_ptr(), l)),
        )
    }

    pub(crate) fn clamp(
        &self,
        l: &Layout,
        lo: Option<Scalar>,
        hi: Option<Scalar>,
    ) -> Result<Storage> {
        let _op = self.profiled(Op::Clamp, Work::elementwise(l.numel(), 1, self.dtype));
        self.produce(
            self.dtype,
            l.numel(),
            |out| {
                with_arith!(self.dtype, T, {
                    let (lo, hi) = (
                        lo.map(|s| s.to_element::<T>()),
                        hi.map(|s| s.to_element::<T>()),
                    );
                    ew::clamp::<T>(self.slice(), l, lo, hi, out.slice_mut())
                })
            },
            |g, out| gpu::clamp(g, self.dtype, out, (self.device_ptr(), l), (lo, hi)),
        )
    }

    pub(crate) fn where_(
        c: (&Storage, &Layout),
        a: (&Storage, &Layout),
        b: (&Storage, &Layout),
    ) -> Result<Storage> {
        let _op =
            a.0.profiled(Op::Where, Work::elementwise(a.1.numel(), 3, a.0.dtype));
        a.0.produce(
            a.0.dtype,
            a.1.numel(),
            |out| {
                crate::with_dtype!(a.0.dtype, T, {
                    ew::where_::<T>(
                        (c.0.slice(), c.1),
                        (a.0.slice(), a.1),
                        (b.0.slice(), b.1),
                        out.slice_mut(),
                    )
                })
            },
            |g, out| {
                let inputs = (
                    (c.0.device_ptr(), c.1),
                    (a.0.device_ptr(), a.1),
                    (b.0.device_ptr(), b.1),
                );
                gpu::where_(g, a.0.dtype, out, inputs.0, inputs.1, inputs.2)
            },
        )
    }

    /// The elements of the view `l` of a host storage, in row-major order, as `T` (the
    /// storage's element type).
    pub(crate) fn read_vec<T: Element>(&self, l: &Layout) -> Result<Vec<T>> {
        let s = self.slice::<T>();
        // An empty view may start past its storage's end (`narrow(0, 1, 0)` of one row).
        if l.is_contiguous() && l.numel() > 0 {
            let mut out = crate::memory::host_vec_with_capacity(Op::ToVec.name(), l.numel())?;
            out.extend_from_slice(&s[l.offset..l.offset + l.numel()]);
            return Ok(out);
        }
        let mut out = crate::memory::host_vec(Op::ToVec.name(), l.numel(), T::zero())?;
        cpu::map1(s, l, &mut out, |x| x);
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
