//! Matrix products on host slices. Floats go to the `gemm` crate (AVX-512 kernels chosen at run
//! time, strided operands without copies); integers use a plain loop with i64 accumulation.

use gemm_common::Parallelism;

use crate::base::dtype::Element;

/// One operand of a batch of products: the offset of each batch's matrix, and the row and
/// column strides (in elements) shared by all of them.
pub struct Operand<'a, T> {
    pub data: &'a [T],
    pub offsets: &'a [usize],
    pub row_stride: usize,
    pub col_stride: usize,
}

/// Products of fewer multiply-adds than this run on the calling thread: waking another thread
/// costs more than it saves.
const SPLIT_FLOPS: usize = 1 << 20;
/// The fewest output rows a thread is given. Larger products are split by output rows, one part
/// per thread with the caller running one (`fork::split`): on this machine kind that beat
/// `gemm`'s own rayon parallelism at every size measured (a 64-row training-step product to
/// 2048³), since the caller never sleeps. A product with too few rows to split (a vector
/// times a matrix) is left to `gemm`'s parallelism instead.
const MIN_SPLIT_ROWS: usize = 16;

pub trait Matmul: Element {
    /// `out[b] = a[b] · rhs[b]` for every batch `b`, or with `accumulate` `out[b] += a[b] · b[b]`
    /// (added as the GEMM goes, a block of `k` at a time, or in f32 and rounded once for halves:
    /// not always the bits `matmul` then `add` give); `out` is contiguous `batch × m × n`.
    fn matmul(
        a: &Operand<Self>,
        b: &Operand<Self>,
        dims: (usize, usize, usize),
        accumulate: bool,
        out: &mut [Self],
    );
}

/// Runs the `batch` products whose `m × n` outputs lie one after another in `out`, on as many
/// threads as pay. `rows(dst, i, count, skip, par)` computes `count` rows of batch `i`'s product
/// into `dst`, starting `skip` elements into its `a`, with `gemm`'s own parallelism `par`.
fn run_products<T, F>(
    out: &mut [T],
    batch: usize,
    (m, n, k): (usize, usize, usize),
    a_row_stride: usize,
    rows: &F,
) where
    F: Fn(&mut [T], usize, usize, usize, Parallelism) + Sync,
{
    let threads = rayon::current_num_threads();
    let size = (m * n).max(1);
    if m * n * k < SPLIT_FLOPS || threads == 1 {
        for (i, dst) in out.chunks_mut(size).enumerate().take(batch) {
            rows(dst, i, m, 0, Parallelism::None);
        }
    } else if batch == 1 && m >= 2 * MIN_SPLIT_ROWS {
        split_by_rows(out, (m, n), a_row_stride, threads, rows);
    } else if batch == 1 {
        rows(out, 0, m, 0, Parallelism::Rayon(0));
    } else {
        split_by_products(out, batch, (m, size), threads, rows);
    }
}

/// One product split by output rows, at least `MIN_SPLIT_ROWS` a part: each part runs `gemm` on
/// its rows.
fn split_by_rows<T, F>(
    out: &mut [T],
    (m, n): (usize, usize),
    a_row_stride: usize,
    threads: usize,
    rows: &F,
) where
    F: Fn(&mut [T], usize, usize, usize, Parallelism) + Sync,
{
    let per = m.div_ceil(threads).max(MIN_SPLIT_ROWS);
    let ptr = super::SendPtr(out.as_mut_ptr());
    super::fork::split(m.div_ceil(per), &|t| {
        let part_rows = per.min(m - t * per);
        let p = ptr;
        // SAFETY: each part's rows of `out` are disjoint and inside it.
        let dst = unsafe { std::slice::from_raw_parts_mut(p.0.add(t * per * n), part_rows * n) };
        let skip = t * per * a_row_stride;
        rows(dst, 0, part_rows, skip, Parallelism::None);
    });
}

/// Several products, each `m` rows and `size` elements of `out`: each part runs whole products.
fn split_by_products<T, F>(
    out: &mut [T],
    batch: usize,
    (m, size): (usize, usize),
    threads: usize,
    rows: &F,
) where
    F: Fn(&mut [T], usize, usize, usize, Parallelism) + Sync,
{
    let per = batch.div_ceil(threads);
    let ptr = super::SendPtr(out.as_mut_ptr());
    super::fork::split(batch.div_ceil(per), &|t| {
        for i in t * per..((t + 1) * per).min(batch) {
            let p = ptr;
            // SAFETY: each batch's product is a disjoint `m × n` block of `out`.
            let dst = unsafe { std::slice::from_raw_parts_mut(p.0.add(i * size), size) };
            rows(dst, i, m, 0, Parallelism::None);
        }
    });
}

macro_rules! gemm_float {
    ($t:ty, $one:expr, $kernel:path) => {
        impl Matmul for $t {
            fn matmul(
                a: &Operand<$t>,
                b: &Operand<$t>,
                (m, n, k): (usize, usize, usize),
                accumulate: bool,
                out: &mut [$t],
            ) {
                let batch = a.offsets.len();
                // `rows` rows of batch `i`'s product, starting `skip` elements into its `a`.
                let one_rows = |dst: &mut [$t], i: usize, m: usize, skip: usize, par| {
                    if m == 0 || n == 0 {
                        return;
                    }
                    if k == 0 {
                        if !accumulate {
                            dst.fill(<$t as Element>::zero());
                        }
                        return;
                    }
                    let a_at = a.data.as_ptr().wrapping_add(a.offsets[i] + skip);
                    let b_at = b.data.as_ptr().wrapping_add(b.offsets[i]);
                    let (a_rs, a_cs) = (a.row_stride as isize, a.col_stride as isize);
                    let (b_rs, b_cs) = (b.row_stride as isize, b.col_stride as isize);
                    // `gemm`'s kernels prefer a column-major output, so a row-major product of
                    // more than one column is computed as its transpose, dstᵀ = bᵀ·aᵀ (as the
                    // `gemm` crate's own entry point arranges it). Arguments: sizes, then each
                    // of dst, lhs, rhs with its column and row strides.
                    #[rustfmt::skip]
                    let (rows, cols, dst_cs, dst_rs, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs) =
                        if n > 1 {
                            (n, m, n as isize, 1, b_at, b_rs, b_cs, a_at, a_rs, a_cs)
                        } else {
                            (m, n, 1, n as isize, a_at, a_cs, a_rs, b_at, b_cs, b_rs)
                        };
                    // SAFETY: every index the strides reach was bounds-checked by the tensor layer
                    // (the layouts come from valid views of these slices); `dst` is m×n contiguous.
                    unsafe {
                        $kernel()(
                            rows,
                            cols,
                            k,
                            dst.as_mut_ptr(),
                            dst_cs,
                            dst_rs,
                            accumulate,
                            lhs,
                            lhs_cs,
                            lhs_rs,
                            rhs,
                            rhs_cs,
                            rhs_rs,
                            // dst = alpha·dst + beta·a·b, dst read only with `accumulate`.
                            $one,
                            $one,
                            false,
                            false,
                            false,
                            par,
                        )
                    }
                };
                run_products(out, batch, (m, n, k), a.row_stride, &one_rows);
            }
        }
    };
}
// The f32 and f64 crates of `gemm`, not its umbrella crate: that also compiles complex and f16
// kernels placelab never calls, about a sixth of the CPU time of every engine build.
gemm_float!(f32, 1.0, gemm_f32::gemm::f32::get_gemm_fn);
gemm_float!(f64, 1.0, gemm_f64::gemm::f64::get_gemm_fn);

macro_rules! int_matmul {
    ($t:ty) => {
        impl Matmul for $t {
            fn matmul(
                a: &Operand<$t>,
                b: &Operand<$t>,
                (m, n, k): (usize, usize, usize),
                accumulate: bool,
                out: &mut [$t],
            ) {
                for (bi, dst) in out
                    .chunks_mut((m * n).max(1))
                    .enumerate()
                    .take(a.offsets.len())
                {
                    let (ao, bo) = (a.offsets[bi], b.offsets[bi]);
                    for i in 0..m {
                        for j in 0..n {
                            let mut acc: i64 = 0;
                            for p in 0..k {
                                let x = a.data[ao + i * a.row_stride + p * a.col_stride] as i64;
                                let y = b.data[bo + p * b.row_stride + j * b.col_stride] as i64;
                                acc = acc.wrapping_add(x.wrapping_mul(y));
                            }
                            let d = &mut dst[i * n + j];
                            *d = if accumulate {
                                d.wrapping_add(acc as $t)
                            } else {
                                acc as $t
                            };
                        }
                    }
                }
            }
        }
    };
}
int_matmul!(i64);
int_matmul!(i32);
int_matmul!(u8);
