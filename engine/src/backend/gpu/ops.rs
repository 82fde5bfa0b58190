//! The ops on a real GPU: each one launches a kernel of `kernels/*.cu` on the device's stream.
//! The caller (the storage layer) allocates every buffer and passes device pointers: an input is
//! a pointer and its view (`Input`), read through strided views with dims merged on the host;
//! outputs are contiguous. Nothing here waits for the GPU.

use super::call::Grid;
use super::launch;
use super::runtime::Gpu;
use super::strided::{Strided, strided, views};
use crate::base::dtype::{DType, Scalar};
use crate::base::op::{BinaryOp, CmpOp, Op, UnaryOp};
use crate::device::error::Result;
use crate::device::layout::{Layout, coalesce};

/// An input of an op: a device pointer to the start of its buffer, and the view read from it.
pub(crate) type Input<'a> = (u64, &'a Layout);

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

// `binary_code`, `compare_code`, `unary_code` and `dtype_code`: each enum's codes in the kernels
// (`PL_BINARY_ADD` …), from `kernels/codes.rs`, where `build.rs` reads them for the kernels.
macro_rules! op_codes {
    ($($(#[$doc:meta])* $f:ident($ty:ident) as $prefix:ident { $($v:ident = $c:literal),* $(,)? })*) => {
        $(
            $(#[$doc])*
            fn $f(op: $ty) -> i32 {
                match op {
                    $($ty::$v => $c,)*
                }
            }
        )*
    };
}
include!("../../../../kernels/codes.rs");

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

pub(super) fn elementwise_grid(n: usize) -> Grid {
    // Grid-stride loops, four elements a thread: one 16-byte pack of f32 where the kernel reads
    // packs (contiguous operands), four turns of the loop where it cannot. At most 2^16 blocks,
    // which fill any GPU many times over.
    let blocks = n.div_ceil(4 * 256).clamp(1, 1 << 16) as u32;
    Grid {
        blocks: (blocks, 1, 1),
        threads: (256, 1, 1),
        shared_bytes: 0,
    }
}

/// `out = a op b` over `a`'s view (`b`'s view has the same shape), in `dtype`.
pub(crate) fn binary(
    g: &Gpu,
    op: BinaryOp,
    dtype: DType,
    out: u64,
    a: Input,
    b: Input,
) -> Result<()> {
    pairwise(
        g,
        launch::binary::<Op>,
        binary_code(op),
        op.into(),
        dtype,
        out,
        a,
        b,
    )
}

/// `out = a op b` as bools, the inputs in `dtype`.
pub(crate) fn compare(
    g: &Gpu,
    op: CmpOp,
    dtype: DType,
    out: u64,
    a: Input,
    b: Input,
) -> Result<()> {
    pairwise(
        g,
        launch::compare::<Op>,
        compare_code(op),
        op.into(),
        dtype,
        out,
        a,
        b,
    )
}

/// The launcher of the binary or the compare kernels, which take the same parameters.
type PairwiseKernel =
    fn(&Gpu, &str, Grid, Op, i32, u64, u64, u64, Strided, u64, Strided) -> Result<()>;

/// `kernel(op, n, out, a, la, b, lb)` for the binary and compare kernels.
#[allow(clippy::too_many_arguments)]
fn pairwise(
    g: &Gpu,
    kernel: PairwiseKernel,
    code: i32,
    op: Op,
    dtype: DType,
    out: u64,
    (pa, la): Input,
    (pb, lb): Input,
) -> Result<()> {
    let n = la.numel();
    if n == 0 {
        return Ok(());
    }
    let v = views(op, &[la, lb])?;
    let grid = elementwise_grid(n);
    kernel(
        g,
        tag(dtype),
        grid,
        op,
        code,
        n as u64,
        out,
        pa,
        v[0],
        pb,
        v[1],
    )
}

/// `a op number` (`number op a` when `reverse`) for f16/bf16 input, with the number in f32.
#[allow(clippy::too_many_arguments)]
pub(crate) fn binary_number(
    g: &Gpu,
    op: BinaryOp,
    dtype: DType,
    out: u64,
    a: Input,
    number: f32,
    reverse: bool,
) -> Result<()> {
    let (oc, rev) = (binary_code(op), reverse as i32);
    map_one(op.into(), dtype, out, a, |t, cfg, [n, po, pa], v| {
        launch::binary_number(g, t, cfg, op, oc, n, po, pa, v, number, rev)
    })
}

/// `a op number` as bools for f16/bf16 input, compared in f32.
pub(crate) fn compare_number(
    g: &Gpu,
    op: CmpOp,
    dtype: DType,
    out: u64,
    a: Input,
    number: f32,
) -> Result<()> {
    let oc = compare_code(op);
    map_one(op.into(), dtype, out, a, |t, cfg, [n, po, pa], v| {
        launch::compare_number(g, t, cfg, op, oc, n, po, pa, v, number)
    })
}

/// The shape of every one-input element-wise op: fills (unless empty) the contiguous output of
/// the input view's shape through `launch`, which gets the input's dtype suffix, the grid,
/// `[element count, output pointer, input pointer]` and the input's view.
fn map_one(
    op: Op,
    dtype: DType,
    out: u64,
    (pa, l): Input,
    launch: impl FnOnce(&str, Grid, [u64; 3], Strided) -> Result<()>,
) -> Result<()> {
    let n = l.numel();
    if n == 0 {
        return Ok(());
    }
    let v = views(op, &[l])?;
    launch(tag(dtype), elementwise_grid(n), [n as u64, out, pa], v[0])
}

pub(crate) fn unary(g: &Gpu, op: UnaryOp, dtype: DType, out: u64, a: Input) -> Result<()> {
    let oc = unary_code(op);
    map_one(op.into(), dtype, out, a, |t, cfg, [n, po, pa], v| {
        launch::unary(g, t, cfg, op, oc, n, po, pa, v)
    })
}

pub(crate) fn clamp(
    g: &Gpu,
    dtype: DType,
    out: u64,
    a: Input,
    (lo, hi): (Option<Scalar>, Option<Scalar>),
) -> Result<()> {
    let bits = |x: Option<Scalar>| x.map_or(0, |x| scalar_bits(dtype, x));
    let (has_lo, lo_bits) = (lo.is_some() as i32, bits(lo));
    let (has_hi, hi_bits) = (hi.is_some() as i32, bits(hi));
    map_one(Op::Clamp, dtype, out, a, |t, cfg, [n, po, pa], v| {
        launch::clamp(
            g,
            t,
            cfg,
            Op::Clamp,
            n,
            po,
            pa,
            v,
            has_lo,
            lo_bits,
            has_hi,
            hi_bits,
        )
    })
}

/// `out = c ? a : b`, the values in `dtype`.
pub(crate) fn where_(
    g: &Gpu,
    dtype: DType,
    out: u64,
    (pc, lc): Input,
    (pa, la): Input,
    (pb, lb): Input,
) -> Result<()> {
    let n = la.numel();
    if n == 0 {
        return Ok(());
    }
    let v = views(Op::Where, &[lc, la, lb])?;
    let grid = elementwise_grid(n);
    launch::where_cond(
        g,
        tag(dtype),
        grid,
        Op::Where,
        n as u64,
        out,
        pc,
        v[0],
        pa,
        v[1],
        pb,
        v[2],
    )
}

/// A contiguous copy of the view of `a` (in `from`), converted to `to`.
pub(crate) fn cast(g: &Gpu, from: DType, to: DType, out: u64, a: Input) -> Result<()> {
    map_one(Op::ToDtype, from, out, a, |t, cfg, [n, po, pa], v| {
        launch::cast(g, t, cfg, Op::ToDtype, dtype_code(to), n, po, pa, v)
    })
}

/// Writes the view `src` into the view `dst` (same shape and dtype). The destination may be
/// shared: the write is ordered on the device's stream like every other op.
pub(crate) fn write_view(g: &Gpu, dtype: DType, (pd, ld): Input, (ps, ls): Input) -> Result<()> {
    let n = ld.numel();
    if n == 0 {
        return Ok(());
    }
    let v = views(Op::Copy, &[ld, ls])?;
    let grid = elementwise_grid(n);
    launch::copy(
        g,
        width_tag(dtype),
        grid,
        Op::Copy,
        n as u64,
        pd,
        v[0],
        ps,
        v[1],
    )
}

/// The entries an `index_select` reads along its dim: a device buffer of i64 or i32 viewed by
/// `layout` (one dim, or none), negative ones counting from the end of the dim. `checked`: the
/// host has checked them already; else the kernel checks each (`checks.rs`).
pub(crate) struct Entries<'a> {
    pub ptr: u64,
    pub layout: &'a Layout,
    pub dtype: DType,
    pub checked: bool,
}

/// `index_select` in one launch: fills the contiguous output (the shape of `l` with one entry of
/// `entries` for each coordinate along `dim`) from the view `l`. An entry outside the dim gives
/// zeros and is reported at the host's next wait for the device.
pub(crate) fn index_select(
    g: &Gpu,
    dtype: DType,
    out: u64,
    (src, l): Input,
    dim: usize,
    entries: Entries,
) -> Result<()> {
    let count = entries.layout.numel();
    let n: usize = (l.shape.iter().enumerate())
        .map(|(d, &size)| if d == dim { count } else { size })
        .product();
    if n == 0 {
        return Ok(());
    }
    // The dims before `dim` merge among themselves, as do those after it; `dim` stays its own.
    let merged = |dims: std::ops::Range<usize>| {
        let part = Layout {
            shape: l.shape[dims.clone()].to_vec(),
            strides: l.strides[dims].to_vec(),
            offset: 0,
        };
        let (shape, mut strides) = coalesce(&[&part]);
        (shape, strides.remove(0))
    };
    let (mut shape, mut strides) = merged(0..dim);
    let at = shape.len();
    let (inner_shape, inner_strides) = merged(dim + 1..l.shape.len());
    shape.push(count);
    strides.push(l.strides[dim]);
    shape.extend(inner_shape);
    strides.extend(inner_strides);
    // Whole rows after `dim` (one gap-free run of at least GATHER_ROW_MIN elements in
    // kernels/gather.cu): the kernel copies a row per block, so the grid counts rows.
    let row = (strides.len() == at + 2 && strides[at + 1] == 1 && shape[at + 1] >= 128)
        .then(|| shape[at + 1]);
    let v = strided(Op::IndexSelect, l.offset, &shape, &strides)?;
    let grid = match row {
        Some(inner) => Grid {
            blocks: ((n / inner).clamp(1, 1 << 16) as u32, 1, 1),
            threads: (256, 1, 1),
            shared_bytes: 0,
        },
        None => elementwise_grid(n),
    };
    let e = entries.layout;
    let li = strided(Op::IndexSelect, e.offset, &e.shape, &e.strides)?;
    let size = l.shape[dim];
    let fault = match entries.checked {
        true => 0,
        false => g.index_check(Op::IndexSelect, dim, size)?,
    };
    let index_i32 = i32::from(entries.dtype == DType::I32);
    let (nn, t, at) = (n as u64, width_tag(dtype), at as i32);
    let (index, size) = (entries.ptr, size as u64);
    let op = Op::IndexSelect;
    launch::index_select(
        g, t, grid, op, nn, out, src, v, at, index, li, index_i32, size, fault,
    )
}

/// Sets the `n` elements of `dtype` at `ptr` to `value`.
pub(crate) fn fill(g: &Gpu, dtype: DType, ptr: u64, n: usize, value: Scalar) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let bits = scalar_bits(dtype, value);
    launch::fill(
        g,
        width_tag(dtype),
        elementwise_grid(n),
        Op::Fill,
        n as u64,
        ptr,
        bits,
    )
}

/// nll_loss's rows (`class_rows` in `kernels/gather.cu`): `classes` values of `dtype` (f32 or
/// f64) at `out` for each class index in `target` (i64), at the class −1, or −num/den with
/// `scale` (the device addresses of two 0-d values of `dtype`), and 0 elsewhere. A class outside
/// `0..classes` is reported at the host's next wait for the device (`checks.rs`).
pub(crate) fn class_rows(
    g: &Gpu,
    dtype: DType,
    out: u64,
    (target, lt): Input,
    classes: usize,
    scale: Option<(u64, u64)>,
    op: Op,
) -> Result<()> {
    let n = lt.numel() * classes;
    if n == 0 {
        return Ok(());
    }
    let fault = g.index_check(op, 1, classes)?;
    let v = strided(op, lt.offset, &lt.shape, &lt.strides)?;
    let (nn, c) = (n as u64, classes as u64);
    let (num, den) = scale.unwrap_or((0, 0));
    let grid = elementwise_grid(n);
    launch::class_rows(
        g,
        tag(dtype),
        grid,
        op,
        nn,
        c,
        out,
        target,
        v,
        num,
        den,
        fault,
    )
}
