//! The engine's storage ops on a real GPU: each one launches a kernel of `kernels/*.cu` on the
//! device's stream. Inputs are read through strided views (dims merged on the host), outputs are
//! contiguous, and nothing here waits for the GPU except reading values back.

use std::sync::Arc;

use cudarc::driver::{DeviceRepr, LaunchConfig};

use super::launch;
use super::runtime::{Gpu, gpu};
use crate::cpu::elementwise::{BinaryOp, CmpOp, UnaryOp};
use crate::layout::{Layout, coalesce};
use crate::storage::Storage;
use crate::{DType, Device, Error, Result, Scalar};

/// As `MAX_DIMS` in `kernels/common.cuh`.
pub(crate) const MAX_DIMS: usize = 8;
/// As `REDUCE_THREADS` in `kernels/reduce.cu`.
const REDUCE_THREADS: u32 = 256;

/// A view as the kernels read it (`Strided` in `kernels/common.cuh`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Strided {
    offset: u64,
    rank: u64,
    shape: [u64; MAX_DIMS],
    strides: [u64; MAX_DIMS],
}
// SAFETY: a plain `repr(C)` struct of integers, laid out as the kernels' `Strided`.
unsafe impl DeviceRepr for Strided {}

/// The kernels' views of `layouts` (one shape), with mergeable dims merged.
pub(crate) fn views(op: &'static str, layouts: &[&Layout]) -> Result<Vec<Strided>> {
    let (shape, strides) = coalesce(layouts);
    if shape.len() > MAX_DIMS {
        return Err(Error::invalid(
            op,
            format!(
                "on CUDA a tensor view may have at most {MAX_DIMS} dims that cannot be merged, this one has {}; reshape the tensor to fewer dims first",
                shape.len()
            ),
        ));
    }
    Ok(layouts
        .iter()
        .zip(strides)
        .map(|(l, st)| {
            let mut v = Strided {
                offset: l.offset as u64,
                rank: shape.len() as u64,
                shape: [0; MAX_DIMS],
                strides: [0; MAX_DIMS],
            };
            for d in 0..shape.len() {
                v.shape[d] = shape[d] as u64;
                v.strides[d] = st[d] as u64;
            }
            v
        })
        .collect())
}

/// The suffix of a dtype's kernels (`binary_f32`).
pub(crate) fn tag(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::U8 => "u8",
        DType::Bool => "bool",
    }
}

/// The dtype codes of `kernels/cast.cu` (`DT_F32` …).
fn code(d: DType) -> i32 {
    match d {
        DType::F32 => 0,
        DType::F64 => 1,
        DType::F16 => 2,
        DType::BF16 => 3,
        DType::I64 => 4,
        DType::I32 => 5,
        DType::U8 => 6,
        DType::Bool => 7,
    }
}

/// The copy and fill kernels move bits: one per element width.
fn width_tag(d: DType) -> &'static str {
    match d.size_in_bytes() {
        1 => "b1",
        2 => "b2",
        4 => "b4",
        _ => "b8",
    }
}

/// `value` converted to `dtype`, as the bits a kernel's `from_bits<T>` reads.
pub(crate) fn scalar_bits(dtype: DType, value: Scalar) -> u64 {
    crate::with_dtype!(dtype, T, {
        let v: T = value.to_element::<T>();
        let mut bits = 0u64;
        // SAFETY: every element type is at most 8 bytes and plain data.
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::ptr::from_ref(&v).cast::<u8>(),
                std::ptr::from_mut(&mut bits).cast::<u8>(),
                std::mem::size_of::<T>(),
            )
        };
        bits
    })
}

fn elementwise_grid(n: usize) -> LaunchConfig {
    // Grid-stride loops: enough blocks to fill any GPU, never more than the work needs.
    let blocks = n.div_ceil(256).clamp(1, 1 << 16) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A reduction grid for `count` blocks' worth of work: the kernels walk their blocks
/// `blockIdx.x, blockIdx.x + gridDim.x, …`, so the grid stays within the launch limits however
/// many rows there are.
fn blocks(count: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (count.clamp(1, 1 << 16) as u32, 1, 1),
        block_dim: (REDUCE_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The GPU a storage lives on.
pub(crate) fn gpu_of(s: &Storage) -> Result<Arc<Gpu>> {
    match s.device() {
        Device::Cuda(i) => gpu(i),
        Device::Cpu => unreachable!("a CPU storage has no GPU"),
    }
}

fn binary_code(op: BinaryOp) -> i32 {
    match op {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
        BinaryOp::Pow => 4,
        BinaryOp::Maximum => 5,
        BinaryOp::Minimum => 6,
    }
}

pub(crate) fn binary(
    op: BinaryOp,
    a: &Storage,
    la: &Layout,
    b: &Storage,
    lb: &Layout,
) -> Result<Storage> {
    pairwise(
        launch::binary,
        binary_code(op),
        op.name(),
        a.dtype(),
        (a, la),
        (b, lb),
    )
}

fn compare_code(op: CmpOp) -> i32 {
    match op {
        CmpOp::Eq => 0,
        CmpOp::Ne => 1,
        CmpOp::Lt => 2,
        CmpOp::Le => 3,
        CmpOp::Gt => 4,
        CmpOp::Ge => 5,
    }
}

pub(crate) fn compare(
    op: CmpOp,
    a: &Storage,
    la: &Layout,
    b: &Storage,
    lb: &Layout,
) -> Result<Storage> {
    pairwise(
        launch::compare,
        compare_code(op),
        op.name(),
        DType::Bool,
        (a, la),
        (b, lb),
    )
}

/// The launcher of the binary or the compare kernels, which take the same parameters.
type PairwiseKernel = fn(
    &Gpu,
    &str,
    LaunchConfig,
    &'static str,
    i32,
    u64,
    u64,
    u64,
    Strided,
    u64,
    Strided,
) -> Result<()>;

/// `kernel(op, n, out, a, la, b, lb)` for the binary and compare kernels.
fn pairwise(
    kernel: PairwiseKernel,
    code: i32,
    op: &'static str,
    out_dtype: DType,
    (a, la): (&Storage, &Layout),
    (b, lb): (&Storage, &Layout),
) -> Result<Storage> {
    let g = gpu_of(a)?;
    let n = la.numel();
    let out = Storage::alloc(a.device(), out_dtype, n)?;
    if n > 0 {
        let v = views(op, &[la, lb])?;
        let (nn, po, pa, pb) = (n as u64, out.device_ptr(), a.device_ptr(), b.device_ptr());
        kernel(
            &g,
            tag(a.dtype()),
            elementwise_grid(n),
            op,
            code,
            nn,
            po,
            pa,
            v[0],
            pb,
            v[1],
        )?;
    }
    Ok(out)
}

/// `a op number` (`number op a` when `reverse`) for an f16/bf16 storage, with the number in f32.
pub(crate) fn binary_number(
    op: BinaryOp,
    a: &Storage,
    la: &Layout,
    number: f32,
    reverse: bool,
) -> Result<Storage> {
    let (oc, rev) = (binary_code(op), reverse as i32);
    map_one(op.name(), a, la, a.dtype(), |g, t, cfg, [n, po, pa], v| {
        launch::binary_number(g, t, cfg, op.name(), oc, n, po, pa, v, number, rev)
    })
}

/// `a op number` for an f16/bf16 storage, compared in f32.
pub(crate) fn compare_number(op: CmpOp, a: &Storage, la: &Layout, number: f32) -> Result<Storage> {
    let oc = compare_code(op);
    map_one(
        op.name(),
        a,
        la,
        DType::Bool,
        |g, t, cfg, [n, po, pa], v| {
            launch::compare_number(g, t, cfg, op.name(), oc, n, po, pa, v, number)
        },
    )
}

/// The shape of every one-input element-wise op: a contiguous output of `l`'s shape in
/// `out_dtype`, filled (unless empty) by `launch`, which gets the GPU, the input's dtype suffix,
/// the grid, `[element count, output pointer, input pointer]` and the input's view.
fn map_one(
    op: &'static str,
    s: &Storage,
    l: &Layout,
    out_dtype: DType,
    launch: impl FnOnce(&Gpu, &str, LaunchConfig, [u64; 3], Strided) -> Result<()>,
) -> Result<Storage> {
    let g = gpu_of(s)?;
    let n = l.numel();
    let out = Storage::alloc(s.device(), out_dtype, n)?;
    if n > 0 {
        let v = views(op, &[l])?;
        let args = [n as u64, out.device_ptr(), s.device_ptr()];
        launch(&g, tag(s.dtype()), elementwise_grid(n), args, v[0])?;
    }
    Ok(out)
}

pub(crate) fn unary(op: UnaryOp, s: &Storage, l: &Layout) -> Result<Storage> {
    let oc: i32 = match op {
        UnaryOp::Neg => 0,
        UnaryOp::Abs => 1,
        UnaryOp::Relu => 2,
        UnaryOp::Exp => 3,
        UnaryOp::Log => 4,
        UnaryOp::Sqrt => 5,
        UnaryOp::Sigmoid => 6,
        UnaryOp::Tanh => 7,
        UnaryOp::Gelu => 8,
        UnaryOp::GeluDerivative => 9,
    };
    map_one(op.name(), s, l, s.dtype(), |g, t, cfg, [n, po, pa], v| {
        launch::unary(g, t, cfg, op.name(), oc, n, po, pa, v)
    })
}

pub(crate) fn clamp(
    s: &Storage,
    l: &Layout,
    lo: Option<Scalar>,
    hi: Option<Scalar>,
) -> Result<Storage> {
    let bits = |x: Option<Scalar>| x.map_or(0, |x| scalar_bits(s.dtype(), x));
    let (has_lo, lo_bits) = (lo.is_some() as i32, bits(lo));
    let (has_hi, hi_bits) = (hi.is_some() as i32, bits(hi));
    map_one("clamp", s, l, s.dtype(), |g, t, cfg, [n, po, pa], v| {
        launch::clamp(
            g, t, cfg, "clamp", n, po, pa, v, has_lo, lo_bits, has_hi, hi_bits,
        )
    })
}

pub(crate) fn where_(
    c: (&Storage, &Layout),
    a: (&Storage, &Layout),
    b: (&Storage, &Layout),
) -> Result<Storage> {
    let g = gpu_of(a.0)?;
    let n = a.1.numel();
    let out = Storage::alloc(a.0.device(), a.0.dtype(), n)?;
    if n > 0 {
        let v = views("where", &[c.1, a.1, b.1])?;
        let (nn, po) = (n as u64, out.device_ptr());
        let (pc, pa, pb) = (c.0.device_ptr(), a.0.device_ptr(), b.0.device_ptr());
        launch::where_cond(
            &g,
            tag(a.0.dtype()),
            elementwise_grid(n),
            "where",
            nn,
            po,
            pc,
            v[0],
            pa,
            v[1],
            pb,
            v[2],
        )?;
    }
    Ok(out)
}

/// A contiguous copy of the view `l`, converted to `dtype`.
pub(crate) fn cast(s: &Storage, l: &Layout, dtype: DType) -> Result<Storage> {
    map_one("to_dtype", s, l, dtype, |g, t, cfg, [n, po, pa], v| {
        launch::cast(g, t, cfg, "to_dtype", code(dtype), n, po, pa, v)
    })
}

/// Writes the view `ls` of `src` into the view `ld` of `dst` (same shape and dtype). `dst` may be
/// shared: the write is ordered on the device's stream like every other op.
pub(crate) fn write_view(dst: &Storage, ld: &Layout, src: &Storage, ls: &Layout) -> Result<()> {
    let g = gpu_of(dst)?;
    let n = ld.numel();
    if n > 0 {
        let v = views("copy", &[ld, ls])?;
        let (nn, pd, ps) = (n as u64, dst.device_ptr(), src.device_ptr());
        launch::copy(
            &g,
            width_tag(dst.dtype()),
            elementwise_grid(n),
            "copy",
            nn,
            pd,
            v[0],
            ps,
            v[1],
        )?;
    }
    Ok(())
}

/// Sets every element of `s` to `value`.
pub(crate) fn fill(s: &Storage, value: Scalar) -> Result<()> {
    let g = gpu_of(s)?;
    let n = s.numel();
    if n > 0 {
        let (nn, p, bits) = (n as u64, s.device_ptr(), scalar_bits(s.dtype(), value));
        launch::fill(
            &g,
            width_tag(s.dtype()),
            elementwise_grid(n),
            "fill",
            nn,
            p,
            bits,
        )?;
    }
    Ok(())
}

/// How many blocks share one row of a reduction: enough blocks to fill a large GPU when there
/// are few rows, never chunks under 4096 elements.
fn parts_per_row(rows: usize, len: usize) -> usize {
    (2048usize.div_ceil(rows.max(1)))
        .min(len.div_ceil(4096))
        .max(1)
}

/// Sums (or means) of `rows` contiguous rows of `len` elements.
pub(crate) fn sum_rows(s: &Storage, rows: usize, len: usize, mean: bool) -> Result<Storage> {
    let g = gpu_of(s)?;
    let out = Storage::alloc(s.device(), s.dtype(), rows)?;
    if rows == 0 {
        return Ok(out);
    }
    let parts = parts_per_row(rows, len);
    let acc = if s.dtype() == DType::I64 {
        DType::I64
    } else {
        DType::F64
    };
    let partial = Storage::alloc(s.device(), acc, rows * parts)?;
    let t = tag(s.dtype());
    let (cn, ln, pn, ps, pp) = (
        (rows * parts) as u64,
        len as u64,
        parts as u64,
        s.device_ptr(),
        partial.device_ptr(),
    );
    launch::sum_partials(&g, t, blocks(rows * parts), "sum", cn, ln, pn, ps, pp)?;
    let (rn, m, po) = (rows as u64, mean as i32, out.device_ptr());
    launch::sum_finish(&g, t, elementwise_grid(rows), "sum", rn, pn, m, ln, pp, po)?;
    Ok(out)
}

/// Per-row max (or min) values and their i64 indices; rows are non-empty.
pub(crate) fn extreme_rows(
    s: &Storage,
    rows: usize,
    len: usize,
    greater: bool,
) -> Result<(Storage, Storage)> {
    let g = gpu_of(s)?;
    let values = Storage::alloc(s.device(), s.dtype(), rows)?;
    let indices = Storage::alloc(s.device(), DType::I64, rows)?;
    if rows == 0 {
        return Ok((values, indices));
    }
    let parts = parts_per_row(rows, len);
    let pv = Storage::alloc(s.device(), s.dtype(), rows * parts)?;
    let pi = Storage::alloc(s.device(), DType::I64, rows * parts)?;
    let t = tag(s.dtype());
    let (cn, ln, pn, gr) = (
        (rows * parts) as u64,
        len as u64,
        parts as u64,
        greater as i32,
    );
    let (ps, ppv, ppi) = (s.device_ptr(), pv.device_ptr(), pi.device_ptr());
    launch::extreme_partials(
        &g,
        t,
        blocks(rows * parts),
        "max",
        cn,
        ln,
        pn,
        gr,
        ps,
        ppv,
        ppi,
    )?;
    let (rn, pvals, pidx) = (rows as u64, values.device_ptr(), indices.device_ptr());
    launch::extreme_finish(
        &g,
        t,
        elementwise_grid(rows),
        "max",
        rn,
        pn,
        gr,
        ppv,
        ppi,
        pvals,
        pidx,
    )?;
    Ok((values, indices))
}

/// Softmax (or log-softmax) of each contiguous row of `len` elements.
pub(crate) fn softmax_rows(s: &Storage, len: usize, log: bool) -> Result<Storage> {
    let g = gpu_of(s)?;
    let out = Storage::alloc(s.device(), s.dtype(), s.numel())?;
    let rows = s.numel().checked_div(len).unwrap_or(0);
    if rows > 0 {
        let (rn, ln, lg) = (rows as u64, len as u64, log as i32);
        let (pi, po) = (s.device_ptr(), out.device_ptr());
        launch::softmax_rows(
            &g,
            tag(s.dtype()),
            blocks(rows),
            "softmax",
            rn,
            ln,
            lg,
            pi,
            po,
        )?;
    }
    Ok(out)
}
