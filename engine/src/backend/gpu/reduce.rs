//! The reductions on a GPU (`kernels/reduce.cu`): sums and means, max/min with their index, and
//! softmax, over contiguous rows, and sums and max/min down the columns of a matrix (a reduction
//! over leading dims, with no transposed copy). A long row (or column) is split into chunks, each
//! a block's work, whose partial results a second kernel combines in a fixed order (a block per
//! row), so a result never depends on timing and one long row still fills the GPU. The caller
//! allocates the partials.

use super::call::Grid;
use super::launch;
use super::ops::tag;
use super::runtime::Gpu;
use crate::base::dtype::DType;
use crate::base::op::Op;
use crate::device::error::Result;

/// As `REDUCE_THREADS` in `kernels/reduce.cu`.
const REDUCE_THREADS: u32 = 256;

/// A reduction grid for `count` blocks' worth of work: the kernels walk their blocks
/// `blockIdx.x, blockIdx.x + gridDim.x, …`, so the grid stays within the launch limits however
/// many rows there are.
fn blocks(g: &Gpu, count: usize) -> Grid {
    Grid {
        blocks: (count.clamp(1, g.max_grid_blocks()) as u32, 1, 1),
        threads: (REDUCE_THREADS, 1, 1),
        shared_bytes: 0,
    }
}

/// How many blocks share one row of a reduction: enough blocks to fill a large GPU when there
/// are few rows, never chunks under 4096 elements. The caller allocates `rows × parts` partial
/// results.
pub(crate) fn reduce_parts(rows: usize, len: usize) -> usize {
    (2048usize.div_ceil(rows.max(1)))
        .min(len.div_ceil(4096))
        .max(1)
}

/// The dtype a sum's partial results are kept in.
pub(crate) fn sum_accumulator(dtype: DType) -> DType {
    if dtype == DType::I64 {
        DType::I64
    } else {
        DType::F64
    }
}

/// Sums (or means) of `rows` contiguous rows of `len` elements of `dtype` at `input` into `out`,
/// through `partial` (`rows × reduce_parts(rows, len)` values of `sum_accumulator(dtype)`; unused,
/// and may be 0, when `reduce_parts` is 1). One launch when a block's share holds a whole row,
/// else two: the chunks' partial sums, then a block per row combining them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sum_rows(
    g: &Gpu,
    dtype: DType,
    input: u64,
    (rows, len): (usize, usize),
    mean: bool,
    partial: u64,
    out: u64,
) -> Result<()> {
    if rows == 0 {
        return Ok(());
    }
    let parts = reduce_parts(rows, len);
    let t = tag(dtype);
    let (cn, ln, pn, m) = ((rows * parts) as u64, len as u64, parts as u64, mean as i32);
    let grid = blocks(g, rows * parts);
    launch::sum_partials(g, t, grid, Op::Sum, cn, ln, pn, m, input, partial, out)?;
    if parts == 1 {
        return Ok(()); // each block finished its row
    }
    let rn = rows as u64;
    launch::sum_finish(g, t, blocks(g, rows), Op::Sum, rn, pn, m, ln, partial, out)
}

/// How many chunks of rows share the columns of a `reduced × kept` column sum: enough blocks
/// (32 columns each) to fill a large GPU, never chunks under 512 rows. The caller allocates
/// `parts × kept` partial sums when it is over 1.
pub(crate) fn column_parts(reduced: usize, kept: usize) -> usize {
    (2048usize.div_ceil(kept.div_ceil(32).max(1)))
        .min(reduced.div_ceil(512))
        .max(1)
}

/// Column sums (or means) of a contiguous `reduced × kept` matrix at `input` into `out`: one
/// launch, or two when long columns are split (`column_parts`) through `partial` (`parts × kept`
/// values of `sum_accumulator(dtype)`; may be 0 with one part).
pub(crate) fn sum_cols(
    g: &Gpu,
    dtype: DType,
    input: u64,
    (reduced, kept): (usize, usize),
    mean: bool,
    (partial, out): (u64, u64),
) -> Result<()> {
    if kept == 0 {
        return Ok(());
    }
    let parts = column_parts(reduced, kept);
    let grid = |count| column_tiles(g, count);
    let tiles = kept.div_ceil(32);
    let (t, r, k, p, m) = (
        tag(dtype),
        reduced as u64,
        kept as u64,
        parts as u64,
        mean as i32,
    );
    launch::sum_cols(
        g,
        t,
        grid(tiles * parts),
        Op::Sum,
        r,
        k,
        p,
        m,
        input,
        partial,
        out,
    )?;
    if parts == 1 {
        return Ok(());
    }
    launch::sum_cols_finish(g, t, grid(tiles), Op::Sum, r, k, p, m, partial, out)
}

/// Per-row max (or min) values and their i64 indices of `rows` non-empty contiguous rows: one
/// launch when a block's share holds a whole row, else two, through `partials`
/// (`rows × reduce_parts(rows, len)` values of `dtype` and as many i64 indices; unused, and may
/// be 0, when `reduce_parts` is 1).
pub(crate) fn extreme_rows(
    g: &Gpu,
    dtype: DType,
    input: u64,
    (rows, len, greater): (usize, usize, bool),
    (partial_values, partial_indices): (u64, u64),
    (values, indices): (u64, u64),
) -> Result<()> {
    if rows == 0 {
        return Ok(());
    }
    let parts = reduce_parts(rows, len);
    let t = tag(dtype);
    let (cn, ln, pn, gr) = (
        (rows * parts) as u64,
        len as u64,
        parts as u64,
        greater as i32,
    );
    let (pv, pi) = (partial_values, partial_indices);
    let op = if greater { Op::Max } else { Op::Min };
    let grid = blocks(g, rows * parts);
    launch::extreme_partials(
        g, t, grid, op, cn, ln, pn, gr, input, pv, pi, values, indices,
    )?;
    if parts == 1 {
        return Ok(()); // each block finished its row
    }
    let (rn, grid) = (rows as u64, blocks(g, rows));
    launch::extreme_finish(g, t, grid, op, rn, pn, gr, pv, pi, values, indices)
}

/// The grid of the column kernels: `count` tiles of 32 columns × 8 row slices.
fn column_tiles(g: &Gpu, count: usize) -> Grid {
    Grid {
        blocks: (count.clamp(1, g.max_grid_blocks()) as u32, 1, 1),
        threads: (32, 8, 1),
        shared_bytes: 0,
    }
}

/// Max (or min) down each column of a contiguous `reduced × kept` matrix (`reduced ≥ 1`), and
/// the row each is in: one launch, or two when long columns are split (`column_parts`) through
/// `partials` (`parts × kept` values of `dtype` and as many i64 indices; may be 0 with one part).
pub(crate) fn extreme_cols(
    g: &Gpu,
    dtype: DType,
    input: u64,
    (reduced, kept, greater): (usize, usize, bool),
    (partial_values, partial_indices): (u64, u64),
    (values, indices): (u64, u64),
) -> Result<()> {
    if kept == 0 {
        return Ok(());
    }
    let parts = column_parts(reduced, kept);
    let tiles = kept.div_ceil(32);
    let (t, r, k, p, gr) = (
        tag(dtype),
        reduced as u64,
        kept as u64,
        parts as u64,
        greater as i32,
    );
    let (pv, pi) = (partial_values, partial_indices);
    let op = if greater { Op::Max } else { Op::Min };
    let grid = column_tiles(g, tiles * parts);
    launch::extreme_cols(g, t, grid, op, r, k, p, gr, input, pv, pi, values, indices)?;
    if parts == 1 {
        return Ok(());
    }
    let grid = column_tiles(g, tiles);
    launch::extreme_cols_finish(g, t, grid, op, k, p, gr, pv, pi, values, indices)
}

/// The f64 values a split softmax keeps per chunk (its max, and its sum of exponentials around
/// that max), or none when every row fits one block: `2 × rows × parts` when `parts > 1`.
pub(crate) fn softmax_partials(rows: usize, len: usize) -> usize {
    match reduce_parts(rows, len) {
        1 => 0,
        parts => 2 * rows * parts,
    }
}

/// Softmax (or log-softmax) of each of `rows` contiguous rows of `len` elements. Rows that fit
/// one block run a block each; longer rows are split (`reduce_parts`) through `partials`
/// (`softmax_partials(rows, len)` f64 values).
#[allow(clippy::too_many_arguments)]
pub(crate) fn softmax_rows(
    g: &Gpu,
    dtype: DType,
    input: u64,
    (rows, len): (usize, usize),
    log: bool,
    partials: u64,
    out: u64,
) -> Result<()> {
    if rows == 0 || len == 0 {
        return Ok(());
    }
    let (t, rn, ln, lg) = (tag(dtype), rows as u64, len as u64, log as i32);
    let parts = reduce_parts(rows, len);
    if parts == 1 {
        return launch::softmax_rows(g, t, blocks(g, rows), Op::Softmax, rn, ln, lg, input, out);
    }
    let chunks = rows * parts;
    let (cn, pn) = (chunks as u64, parts as u64);
    // The chunks' maxima, then their sums (`chunks` f64 each).
    let (maxima, sums) = (partials, partials + 8 * cn);
    let grid = blocks(g, chunks);
    launch::softmax_partials(g, t, grid, Op::Softmax, cn, ln, pn, input, maxima, sums)?;
    launch::softmax_write(
        g,
        t,
        grid,
        Op::Softmax,
        cn,
        ln,
        pn,
        lg,
        input,
        maxima,
        sums,
        out,
    )
}

/// The gradient of softmax (or log-softmax) over `rows` contiguous rows of `len`, from the
/// incoming gradient and the forward's output, into `gx`: one launch, a block per row.
pub(crate) fn softmax_backward_rows(
    g: &Gpu,
    dtype: DType,
    (grad, out): (u64, u64),
    (rows, len): (usize, usize),
    log: bool,
    gx: u64,
) -> Result<()> {
    if rows == 0 || len == 0 {
        return Ok(());
    }
    let (t, rn, ln, lg) = (tag(dtype), rows as u64, len as u64, log as i32);
    launch::softmax_backward_rows(
        g,
        t,
        blocks(g, rows),
        Op::SoftmaxBackward,
        rn,
        ln,
        lg,
        grad,
        out,
        gx,
    )
}

/// Layer norm over `rows` rows of `len`: `out`, and each row's `mean` and `rstd` for the
/// backward pass; `weight` and `bias` are pointers to `len` values, or 0 for none.
pub(crate) fn layer_norm_rows(
    g: &Gpu,
    dtype: DType,
    (input, weight, bias): (u64, u64, u64),
    (rows, len): (usize, usize),
    eps: f64,
    (out, mean, rstd): (u64, u64, u64),
) -> Result<()> {
    if rows == 0 || len == 0 {
        return Ok(());
    }
    let (t, rn, ln, e) = (tag(dtype), rows as u64, len as u64, eps.to_bits());
    let grid = blocks(g, rows);
    let op = Op::LayerNorm;
    launch::layer_norm_rows(
        g, t, grid, op, rn, ln, e, input, weight, bias, out, mean, rstd,
    )
}

/// The input's gradient of `layer_norm_rows` from the incoming gradient `grad` (`weight`: 0
/// for none).
pub(crate) fn layer_norm_backward_rows(
    g: &Gpu,
    dtype: DType,
    (input, mean, rstd, weight): (u64, u64, u64, u64),
    grad: u64,
    (rows, len): (usize, usize),
    gx: u64,
) -> Result<()> {
    if rows == 0 || len == 0 {
        return Ok(());
    }
    let (t, rn, ln) = (tag(dtype), rows as u64, len as u64);
    let grid = blocks(g, rows);
    let op = Op::LayerNormBackward;
    launch::layer_norm_backward_rows(g, t, grid, op, rn, ln, input, mean, rstd, weight, grad, gx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::gpu::runtime::standalone_emulated;

    /// An i64 row sum is kept in u64 (so that overflow wraps); its mean must divide the signed
    /// sum, truncating as the CPU backend does. No tensor op asks for an integer mean today
    /// (PyTorch refuses one), so the kernel is launched here directly.
    #[test]
    fn an_i64_mean_divides_the_signed_sum_as_the_cpu_does() {
        let g = standalone_emulated(1 << 20);
        let values: [i64; 6] = [-7, -3, 1, 2, -10, 4];
        let (rows, len) = (2, 3);
        let bytes = |n: usize| n * 8;
        let input = g.driver.malloc(bytes(6)).unwrap();
        let partial = g
            .driver
            .malloc(bytes(rows * reduce_parts(rows, len)))
            .unwrap();
        let out = g.driver.malloc(bytes(rows)).unwrap();
        let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut back = vec![0u8; bytes(rows)];
        // SAFETY: each block was allocated above with the bytes the kernels and copies use.
        unsafe { g.driver.copy_htod(input, &raw) }.unwrap();
        sum_rows(&g, DType::I64, input, (rows, len), true, partial, out).unwrap();
        unsafe { g.driver.copy_dtoh(&mut back, out) }.unwrap();
        g.synchronize().unwrap();
        let got: Vec<i64> = (back.chunks(8))
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let mut want = [0i64; 2];
        crate::backend::cpu::reduce::sum_rows::<i64>(&values, len, true, &mut want);
        assert_eq!(want, [-3, -1]);
        assert_eq!(got, want);
    }
}
