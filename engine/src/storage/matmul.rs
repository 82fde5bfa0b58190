//! Matrix products, once for every backend: the CPU's GEMM (`cpu::matmul`) on host memory,
//! cuBLAS (`gpu::blas`) on a GPU. A product can also be added onto an existing output in place
//! (β = 1, PyTorch's `addmm`), so that a `Linear`'s bias, broadcast into the output first, joins
//! its GEMM instead of costing a separate add and a second output.

use half::f16;

use super::Storage;
use crate::backend::cpu::{self, matmul::Matmul};
use crate::backend::gpu::blas::{self, Onto};
use crate::base::dtype::{DType, Element};
use crate::base::op::Op;
use crate::device::error::Result;
use crate::device::layout::Layout;
use crate::memory::Block;
use crate::profile::Work;

/// One operand of a batched GEMM: the storage, each batch's matrix offset, (row, column) strides.
pub(crate) type GemmOperand<'a> = (&'a Storage, &'a [usize], (usize, usize));

impl Storage {
    /// Whether `matmul` reads a `rows × cols` matrix of this storage with strides `(rs, cs)` as
    /// it is: the CPU's GEMM takes any strides, cuBLAS needs a unit stride in one dim.
    pub(crate) fn matmul_reads_in_place(
        &self,
        rows: usize,
        cols: usize,
        rs: usize,
        cs: usize,
    ) -> bool {
        self.is_host() || blas::reads_in_place(rows, cols, rs, cs)
    }

    /// Batched `a · b` into a contiguous `batch × m × n` storage. `a_off`/`b_off` give each
    /// batch's matrix offset; `(rs, cs)` are row and column strides. With `onto` (a contiguous
    /// `batch × m × n` storage of the operands' dtype and device, owned by the caller) the
    /// product is added onto it in place and it is returned: no other output is allocated.
    pub(crate) fn matmul(
        a: GemmOperand,
        b: GemmOperand,
        (m, n, k): (usize, usize, usize),
        onto: Option<Storage>,
    ) -> Result<Storage> {
        let (device, dtype, batch) = (a.0.device(), a.0.dtype, a.1.len());
        let work = Work::Matmul {
            dims: (batch as u64, m as u64, n as u64, k as u64),
            dtype,
            tf32: blas::allow_tf32(),
        };
        let accumulate = onto.is_some();
        let _op =
            a.0.profiled(if accumulate { Op::Addmm } else { Op::Matmul }, work);
        let mut out = match onto {
            Some(c) => c,
            None => Storage::alloc(device, dtype, batch * m * n)?,
        };
        let Some(g) = a.0.gpu() else {
            let dims = (m, n, k);
            match dtype {
                DType::F32 => host_matmul::<f32>(a, b, dims, accumulate, &mut out),
                DType::F64 => host_matmul::<f64>(a, b, dims, accumulate, &mut out),
                DType::F16 => host_matmul_in_f32::<f16>(a, b, dims, accumulate, &mut out),
                DType::BF16 => host_matmul_in_f32::<half::bf16>(a, b, dims, accumulate, &mut out),
                DType::I64 => host_matmul::<i64>(a, b, dims, accumulate, &mut out),
                DType::I32 => host_matmul::<i32>(a, b, dims, accumulate, &mut out),
                DType::U8 => host_matmul::<u8>(a, b, dims, accumulate, &mut out),
                DType::Bool => unreachable!("matmul of bool is refused before it runs"),
            }
            return Ok(out);
        };
        // Like PyTorch, the first GEMM on a device takes cuBLAS's workspace from the caching
        // allocator, so it shows in `memory_allocated` from then on.
        let workspace = |bytes| {
            let block = Block::alloc_engine_buffer(device, bytes, "cuBLAS workspace")?;
            Ok((block.ptr() as u64, Box::new(block) as Box<dyn Send>))
        };
        let pa = (a.0.device_ptr(), a.1, a.2);
        let pb = (b.0.device_ptr(), b.1, b.2);
        let onto = if accumulate {
            Onto::Accumulate
        } else {
            Onto::Overwrite
        };
        blas::matmul(
            &*g?,
            dtype,
            pa,
            pb,
            (m, n, k),
            (out.device_ptr(), onto),
            &workspace,
        )?;
        Ok(out)
    }

    /// `bias + a · b` for one `m × k` by `k × n` product (or a batch), `bias` viewed by `lb`
    /// broadcastable to `m × n`. On a GPU a bias row (shape `[n]` or `[1, n]`, its elements side
    /// by side) joins the GEMM's epilogue (cuBLASLt, as PyTorch's `addmm`): no broadcast copy
    /// first. Otherwise the bias is broadcast into a new output, which the GEMM adds the product
    /// onto; for a bias row on a simulated GPU that copy is not priced, as the GPU it stands for
    /// would not make it.
    pub(crate) fn addmm(
        a: GemmOperand,
        b: GemmOperand,
        (m, n, k): (usize, usize, usize),
        (bias, lb): (&Storage, &Layout),
    ) -> Result<Storage> {
        let is_row = lb.shape.last() == Some(&n) && lb.numel() == n;
        let bias_row = is_row && (n == 1 || lb.strides.last() == Some(&1));
        if bias_row
            && let Some(out) = Storage::addmm_in_epilogue(a, b, (m, n, k), (bias, lb.offset))?
        {
            return Ok(out);
        }
        let broadcast = || bias.copy_as(&lb.broadcast_to(&[m, n]), bias.dtype);
        let onto = match bias_row && k > 0 && bias.device().is_cuda() {
            true => crate::profile::unpriced(broadcast)?,
            false => broadcast()?,
        };
        Storage::matmul(a, b, (m, n, k), Some(onto))
    }

    /// `addmm` with the bias row's `n` contiguous elements from element `offset` added in the
    /// GEMM's epilogue, where that applies: on a GPU, one product, none of its sizes 0.
    fn addmm_in_epilogue(
        a: GemmOperand,
        b: GemmOperand,
        (m, n, k): (usize, usize, usize),
        (bias, offset): (&Storage, usize),
    ) -> Result<Option<Storage>> {
        let Some(g) = a.0.gpu() else {
            return Ok(None);
        };
        if k == 0 || m == 0 || n == 0 || a.1.len() != 1 {
            return Ok(None);
        }
        let (device, dtype) = (a.0.device(), a.0.dtype);
        let work = Work::Matmul {
            dims: (1, m as u64, n as u64, k as u64),
            dtype,
            tf32: blas::allow_tf32(),
        };
        let _op = a.0.profiled(Op::Addmm, work);
        let out = Storage::alloc(device, dtype, m * n)?;
        let workspace = |bytes| {
            let block = Block::alloc_engine_buffer(device, bytes, "cuBLAS workspace")?;
            Ok((block.ptr() as u64, Box::new(block) as Box<dyn Send>))
        };
        let pa = (a.0.device_ptr(), a.1, a.2);
        let pb = (b.0.device_ptr(), b.1, b.2);
        let row = bias.device_ptr() + (offset * dtype.size_in_bytes()) as u64;
        let c = (out.device_ptr(), Onto::Bias(row));
        blas::matmul(&*g?, dtype, pa, pb, (m, n, k), c, &workspace)?;
        Ok(Some(out))
    }
}

fn host_matmul<T: Matmul>(
    (a, a_off, (a_rs, a_cs)): GemmOperand,
    (b, b_off, (b_rs, b_cs)): GemmOperand,
    dims: (usize, usize, usize),
    accumulate: bool,
    out: &mut Storage,
) {
    let a = cpu::matmul::Operand {
        data: a.slice::<T>(),
        offsets: a_off,
        row_stride: a_rs,
        col_stride: a_cs,
    };
    let b = cpu::matmul::Operand {
        data: b.slice::<T>(),
        offsets: b_off,
        row_stride: b_rs,
        col_stride: b_cs,
    };
    T::matmul(&a, &b, dims, accumulate, out.slice_mut::<T>());
}

/// A half-precision product on the host: both operands (and an output added onto) widened to
/// f32, multiplied and summed there, and rounded once at the end, as PyTorch's CPU GEMM and
/// cuBLAS accumulate halves (a GEMM in f16 itself loses a unit or two wherever its terms cancel).
fn host_matmul_in_f32<H: Element>(
    (a, a_off, a_strides): GemmOperand,
    (b, b_off, b_strides): GemmOperand,
    dims: (usize, usize, usize),
    accumulate: bool,
    out: &mut Storage,
) {
    let widen = |h: &[H]| {
        let mut w = vec![0f32; h.len()];
        cpu::cast(h, &Layout::contiguous(vec![h.len()]), &mut w);
        w
    };
    let (wa, wb) = (widen(a.slice::<H>()), widen(b.slice::<H>()));
    let operand = |data, offsets, (row_stride, col_stride)| cpu::matmul::Operand {
        data,
        offsets,
        row_stride,
        col_stride,
    };
    let mut wide_out = match accumulate {
        true => widen(out.slice::<H>()),
        false => vec![0f32; out.numel()],
    };
    f32::matmul(
        &operand(&wa, a_off, a_strides),
        &operand(&wb, b_off, b_strides),
        dims,
        accumulate,
        &mut wide_out,
    );
    let len = wide_out.len();
    cpu::cast(
        &wide_out,
        &Layout::contiguous(vec![len]),
        out.slice_mut::<H>(),
    );
}
