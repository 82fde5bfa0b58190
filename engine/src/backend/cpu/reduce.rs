//! Reductions over the rows of a contiguous buffer (`rows × len`): sum, mean, max/min with
//! their indices, and softmax; sums and max/min also down its columns (the reduced dims
//! leading). Callers move the reduced dims last, or first, as these take them.

use rayon::prelude::*;

use super::elementwise::FloatMath;
use super::simd::wide;
use super::{PAR_MIN, chunked};
use crate::base::dtype::Element;

/// Float sums use 64 independent f32 (or f64) lanes per 4096-element block and add the blocks
/// in f64: 12× faster than a serial `iter().sum()` and about 1000× more accurate on 10M f32.
pub trait Sum: Element {
    type Acc: Copy + Send + Sync + std::ops::Add<Output = Self::Acc>;
    const ZERO: Self::Acc;
    fn partial(x: &[Self]) -> Self::Acc;
    fn finish(a: Self::Acc) -> Self;
    fn finish_mean(a: Self::Acc, n: usize) -> Self;
    /// `block[i] += row[i]`, in `Self`.
    fn accumulate(block: &mut [Self], row: &[Self]);
    fn widen(x: Self) -> Self::Acc;
}

macro_rules! float_sum {
    ($t:ty) => {
        impl Sum for $t {
            type Acc = f64;
            const ZERO: f64 = 0.0;
            #[inline(always)]
            fn partial(x: &[$t]) -> f64 {
                // Plain loops, no iterator adaptors: inlined whole into `partial_wide`'s
                // vector copies (an adaptor's `fold` would be compiled for the baseline).
                let mut total = 0.0f64;
                let mut start = 0;
                while start < x.len() {
                    let block = &x[start..(start + 4096).min(x.len())];
                    // 64 lanes: four AVX-512 accumulators for f32, so that the adds do not
                    // wait on each other.
                    let mut lanes = [0.0 as $t; 64];
                    let whole = block.len() / 64 * 64;
                    let mut i = 0;
                    while i < whole {
                        let c = &block[i..i + 64];
                        for l in 0..64 {
                            lanes[l] += c[l];
                        }
                        i += 64;
                    }
                    let mut sum = 0.0f64;
                    for &v in &block[whole..] {
                        sum += v as f64;
                    }
                    for l in lanes {
                        sum += l as f64;
                    }
                    total += sum;
                    start += 4096;
                }
                total
            }
            fn finish(a: f64) -> $t {
                a as $t
            }
            fn finish_mean(a: f64, n: usize) -> $t {
                (a / n as f64) as $t
            }
            #[inline(always)]
            fn accumulate(block: &mut [$t], row: &[$t]) {
                for (b, &x) in block.iter_mut().zip(row) {
                    *b += x;
                }
            }
            fn widen(x: $t) -> f64 {
                x as f64
            }
        }
    };
}
float_sum!(f32);
float_sum!(f64);

impl Sum for i64 {
    type Acc = i64;
    const ZERO: i64 = 0;
    fn partial(x: &[i64]) -> i64 {
        x.iter().fold(0i64, |a, &b| a.wrapping_add(b))
    }
    fn finish(a: i64) -> i64 {
        a
    }
    fn finish_mean(a: i64, n: usize) -> i64 {
        a / n as i64
    }
    fn accumulate(block: &mut [i64], row: &[i64]) {
        for (b, &x) in block.iter_mut().zip(row) {
            *b = b.wrapping_add(x);
        }
    }
    fn widen(x: i64) -> i64 {
        x
    }
}

fn row_sum<T: Sum>(row: &[T]) -> T::Acc {
    if row.len() < PAR_MIN {
        return partial_wide(row);
    }
    // One part per thread, the caller's among them; blocks of 4096 keep their boundaries, so
    // the result does not depend on the thread count beyond the order of the f64 additions.
    let parts = rayon::current_num_threads();
    let per = row.len().div_ceil(parts).div_ceil(4096) * 4096;
    let sums: Vec<std::sync::Mutex<T::Acc>> =
        (0..parts).map(|_| std::sync::Mutex::new(T::ZERO)).collect();
    super::fork::split(parts, &|p| {
        let start = (p * per).min(row.len());
        let part = partial_wide(&row[start..(start + per).min(row.len())]);
        *sums[p].lock().unwrap_or_else(|e| e.into_inner()) = part;
    });
    sums.into_iter()
        .map(|s| s.into_inner().unwrap_or_else(|e| e.into_inner()))
        .fold(T::ZERO, |a, b| a + b)
}

/// `out[r] = Σ data[r·len .. (r+1)·len]` (or the mean).
pub fn sum_rows<T: Sum>(data: &[T], len: usize, mean: bool, out: &mut [T]) {
    let finish = |acc: T::Acc| {
        if mean {
            T::finish_mean(acc, len)
        } else {
            T::finish(acc)
        }
    };
    if out.len() == 1 {
        out[0] = finish(row_sum(data));
        return;
    }
    if len == 0 {
        out.fill(finish(T::ZERO));
        return;
    }
    // Many rows: one task per batch of rows; each row summed serially.
    let per_task = (PAR_MIN / len).max(1);
    out.par_chunks_mut(per_task).enumerate().for_each(|(t, o)| {
        for (i, v) in o.iter_mut().enumerate() {
            let r = t * per_task + i;
            *v = finish(T::partial(&data[r * len..(r + 1) * len]));
        }
    });
}

/// `out[c] = Σ_r data[r·kept + c]` (or the mean) over `reduced` contiguous rows of `kept`
/// elements: the sum over a tensor's leading dims (a bias gradient, a batch sum) without a
/// transposed copy. Rows are added in blocks of 4096 in `T`, and the blocks in `T::Acc`, as
/// `sum_rows` does.
pub fn sum_cols<T: Sum>(data: &[T], reduced: usize, kept: usize, mean: bool, out: &mut [T]) {
    const BLOCK: usize = 4096;
    chunked(out, 1, |c0, o| {
        let width = o.len();
        let mut total = vec![T::ZERO; width];
        let mut block = vec![T::zero(); width];
        for first in (0..reduced).step_by(BLOCK) {
            block.fill(T::zero());
            wide(|| {
                for r in first..(first + BLOCK).min(reduced) {
                    T::accumulate(&mut block, &data[r * kept + c0..][..width]);
                }
            });
            for (t, &b) in total.iter_mut().zip(&block) {
                *t = *t + T::widen(b);
            }
        }
        for (o, t) in o.iter_mut().zip(total) {
            *o = if mean {
                T::finish_mean(t, reduced)
            } else {
                T::finish(t)
            };
        }
    });
}

/// NaN-aware extreme of a row: the first NaN wins (as in PyTorch), ties keep the first index.
fn extreme<T: Element>(row: &[T], start: usize, greater: bool) -> (T, usize) {
    let mut best = row[0];
    let mut at = 0;
    #[allow(clippy::eq_op)]
    let is_nan = |v: T| v != v;
    if is_nan(best) {
        return (best, start);
    }
    for (i, &x) in row.iter().enumerate().skip(1) {
        if is_nan(x) {
            return (x, start + i);
        }
        if (greater && x > best) || (!greater && x < best) {
            best = x;
            at = i;
        }
    }
    (best, start + at)
}

fn combine<T: Element>(a: (T, usize), b: (T, usize), greater: bool) -> (T, usize) {
    #[allow(clippy::eq_op)]
    let is_nan = |v: T| v != v;
    if is_nan(a.0) {
        return a;
    }
    if is_nan(b.0) {
        return b;
    }
    let b_wins = if greater { b.0 > a.0 } else { b.0 < a.0 };
    if b_wins || (b.0 == a.0 && b.1 < a.1) {
        b
    } else {
        a
    }
}

/// For each row of `len ≥ 1` elements: its max (or min) and the index of the first one.
pub fn extreme_rows<T: Element>(
    data: &[T],
    len: usize,
    greater: bool,
    values: &mut [T],
    indices: &mut [i64],
) {
    if values.len() == 1 && len >= PAR_MIN {
        let chunk = 1 << 16;
        let (v, i) = data
            .par_chunks(chunk)
            .enumerate()
            .map(|(c, part)| extreme(part, c * chunk, greater))
            .reduce_with(|a, b| combine(a, b, greater))
            .expect("a non-empty row");
        values[0] = v;
        indices[0] = i as i64;
        return;
    }
    for (r, (v, i)) in values.iter_mut().zip(indices.iter_mut()).enumerate() {
        let (bv, bi) = extreme(&data[r * len..(r + 1) * len], 0, greater);
        *v = bv;
        *i = bi as i64;
    }
}

/// For each column of a contiguous `reduced × kept` matrix (`reduced ≥ 1`): its max (or min) and
/// the row of the first one, the first NaN winning, as `extreme_rows` over the transposed matrix
/// would give, without making it. Columns are split across threads; rows are walked in order.
pub fn extreme_cols<T: Element>(
    data: &[T],
    (reduced, kept): (usize, usize),
    greater: bool,
    values: &mut [T],
    indices: &mut [i64],
) {
    #[allow(clippy::eq_op)]
    let is_nan = |v: T| v != v;
    chunked(indices, 1, |c0, idx| {
        let width = idx.len();
        let mut best = data[c0..c0 + width].to_vec();
        idx.fill(0);
        for r in 1..reduced {
            let row = &data[r * kept + c0..][..width];
            // Without branches (`&`, `|`, selects), so that the loop can vectorise.
            for ((b, i), &x) in best.iter_mut().zip(idx.iter_mut()).zip(row) {
                let better = if greater { x > *b } else { x < *b };
                let take = !is_nan(*b) & (better | is_nan(x));
                *b = if take { x } else { *b };
                *i = if take { r as i64 } else { *i };
            }
        }
    });
    for (c, (v, &i)) in values.iter_mut().zip(indices.iter()).enumerate() {
        *v = data[i as usize * kept + c];
    }
}

/// Softmax (or log-softmax) of each row, computed stably around the row's max. Each pass is a
/// plain loop over the row (max in 16 lanes, exp, lane sum, scale) so that it vectorises.
pub fn softmax_rows<T: FloatMath + Sum<Acc = f64>>(
    data: &[T],
    len: usize,
    log: bool,
    out: &mut [T],
) {
    if len == 0 {
        return;
    }
    chunked(out, len, |start, o| {
        softmax_block(&data[start..start + o.len()], o, len, log)
    });
}

/// The gradient of softmax (or log-softmax) rows of `len` from the incoming gradient `grad` and
/// the forward's output `out`: log-softmax `g − exp(y)·Σg`, softmax `y·(g − Σ g·y)`, each sum in
/// f64 (as `kernels/reduce.cu`'s `softmax_backward_rows`).
pub fn softmax_backward_rows<T: FloatMath>(
    grad: &[T],
    out: &[T],
    len: usize,
    log: bool,
    gx: &mut [T],
) {
    if len == 0 {
        return;
    }
    chunked(gx, len, |start, o| {
        let rows = (grad[start..start + o.len()].chunks(len))
            .zip(out[start..start + o.len()].chunks(len))
            .zip(o.chunks_mut(len));
        for ((g, y), r) in rows {
            let total: f64 = if log {
                g.iter().map(|v| v.to_f64()).sum()
            } else {
                g.iter().zip(y).map(|(a, b)| a.to_f64() * b.to_f64()).sum()
            };
            let total = T::from_f64(total);
            for ((r, &g), &y) in r.iter_mut().zip(g).zip(y) {
                *r = if log {
                    T::sub(g, T::mul(T::exp(y), total))
                } else {
                    T::mul(y, T::sub(g, total))
                };
            }
        }
    });
}

/// The float types softmax runs on.
pub trait SoftmaxFloat: FloatMath + Sum<Acc = f64> {}
impl<T: FloatMath + Sum<Acc = f64>> SoftmaxFloat for T {}

super::simd::vectorized! {
    /// `softmax_row` over consecutive rows of `len`.
    fn softmax_block / softmax_block_at<T: SoftmaxFloat, const FMA: bool>(
        data: &[T],
        out: &mut [T],
        len: usize,
        log: bool,
    ) -> () {
        for (row, orow) in data.chunks(len).zip(out.chunks_mut(len)) {
            softmax_row::<T, FMA>(row, orow, log);
        }
    }
}

super::simd::vectorized! {
    /// `Sum::partial`, in the widest vectors the CPU has.
    fn partial_wide / partial_wide_at<T: Sum>(x: &[T]) -> T::Acc {
        T::partial(x)
    }
}

/// One row of `softmax_rows`. Always inlined, so that it is compiled inside `softmax_block`'s
/// vector copies (a function called from there would be compiled for the baseline target).
#[inline(always)]
fn softmax_row<T: SoftmaxFloat, const FMA: bool>(row: &[T], orow: &mut [T], log: bool) {
    let m = row_max(row);
    // A row of -inf (all masked) has no finite max: exp(NaN) gives NaN, as in PyTorch.
    let sum = exp_shifted_sum::<T, FMA>(row, orow, m);
    if log {
        let ls = T::from_f64(sum.ln());
        for (o, &x) in orow.iter_mut().zip(row) {
            *o = T::sub(T::sub(x, m), ls);
        }
    } else {
        let inv = T::from_f64(1.0 / sum);
        for o in orow.iter_mut() {
            *o = T::mul(*o, inv);
        }
    }
}

/// Writes `e^(x - m)` for the row and returns their sum, in one pass: 16 lanes of `T` summed
/// over runs of 1024 values, each run's lanes added pairwise and then in f64.
#[inline(always)]
fn exp_shifted_sum<T: SoftmaxFloat, const FMA: bool>(row: &[T], orow: &mut [T], m: T) -> f64 {
    let exp = T::exp_nonpositive::<FMA>;
    let mut sum = 0.0f64;
    for (run, orun) in row.chunks(1024).zip(orow.chunks_mut(1024)) {
        let mut lanes = [T::zero(); 16];
        let whole = run.len() / 16 * 16;
        for (c, oc) in run[..whole].chunks_exact(16).zip(orun.chunks_exact_mut(16)) {
            for i in 0..16 {
                let e = exp(T::sub(c[i], m));
                oc[i] = e;
                lanes[i] = T::add(lanes[i], e);
            }
        }
        for (o, &x) in orun[whole..].iter_mut().zip(&run[whole..]) {
            *o = exp(T::sub(x, m));
            sum += o.to_f64();
        }
        let mut width = 8;
        while width > 0 {
            for i in 0..width {
                lanes[i] = T::add(lanes[i], lanes[i + width]);
            }
            width /= 2;
        }
        sum += lanes[0].to_f64();
    }
    sum
}

/// The max of a row, NaN if any element is NaN.
#[inline(always)]
fn row_max<T: Element>(row: &[T]) -> T {
    let neg_inf = T::from_f64(f64::NEG_INFINITY);
    let mut lanes = [neg_inf; 16];
    let mut nan = false;
    let mut it = row.chunks_exact(16);
    for c in &mut it {
        for i in 0..16 {
            lanes[i] = if c[i] > lanes[i] { c[i] } else { lanes[i] };
            #[allow(clippy::eq_op)]
            let is_nan = c[i] != c[i];
            nan |= is_nan;
        }
    }
    let mut m = neg_inf;
    for &x in lanes.iter().chain(it.remainder()) {
        #[allow(clippy::eq_op)]
        let is_nan = x != x;
        nan |= is_nan;
        if x > m {
            m = x;
        }
    }
    if nan { T::from_f64(f64::NAN) } else { m }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::super::simd::for_each_width;
    use super::{partial_wide_at, softmax_block_at};

    fn random(n: usize, scale: f32, seed: u64) -> Vec<f32> {
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
        (0..n)
            .map(|_| (rng.random::<f32>() - 0.5) * scale)
            .collect()
    }

    /// Row lengths short and long: partial vectors of 16 lanes, and past a 1024-value run.
    const LENGTHS: [usize; 8] = [1, 3, 15, 16, 17, 40, 1025, 4099];

    /// Softmax of one row in f64, around its max as the kernel computes it.
    fn softmax_reference(row: &[f32], log: bool) -> Vec<f64> {
        let m = row.iter().fold(f64::NEG_INFINITY, |m, &x| {
            if m.is_nan() || x.is_nan() {
                f64::NAN
            } else {
                m.max(x as f64)
            }
        });
        let sum: f64 = row.iter().map(|&x| (x as f64 - m).exp()).sum();
        row.iter()
            .map(|&x| {
                let shifted = x as f64 - m;
                if log {
                    shifted - sum.ln()
                } else {
                    shifted.exp() / sum
                }
            })
            .collect()
    }

    /// Each copy of the softmax kernel against f64. Tolerance: each e^x is within 2 ulp, the
    /// sum adds at most 64 values per f32 lane, and two more roundings follow, so a relative
    /// 1e-5 holds with room; an e^x below 2^-126 is flushed to 0, an absolute 2^-126 (for
    /// log-softmax, 1e-5 of the value or of 1).
    #[test]
    fn softmax_matches_f64_in_every_copy() {
        let mut rows: Vec<Vec<f32>> = LENGTHS.iter().map(|&n| random(n, 40.0, n as u64)).collect();
        rows.push(random(300, 400.0, 9)); // most values flush to 0 after the shift
        rows.push(vec![f32::NEG_INFINITY; 20]); // all masked: NaN, as in PyTorch
        rows.push([1.0, f32::NEG_INFINITY, 2.0].repeat(7)); // some masked: exactly 0 there
        rows.push([1.0, f32::NAN, 2.0].repeat(7));
        rows.push([1.0, f32::INFINITY, -3.0].repeat(7));
        for_each_width(|w| {
            for row in &rows {
                for log in [false, true] {
                    let mut got = vec![0.0f32; row.len()];
                    softmax_block_at(w, row, &mut got, row.len(), log);
                    let want = softmax_reference(row, log);
                    for (i, (&g, &r)) in got.iter().zip(&want).enumerate() {
                        let g = g as f64;
                        let ok = if r.is_nan() {
                            g.is_nan()
                        } else if log {
                            r == f64::NEG_INFINITY && g == r
                                || (g - r).abs() <= 1e-5 * r.abs().max(1.0)
                        } else {
                            (g - r).abs() <= 1e-5 * r + 2f64.powi(-126)
                        };
                        assert!(
                            ok,
                            "{w}-bit copy, log {log}, row of {}: [{i}] = {g}, want {r}",
                            row.len()
                        );
                    }
                }
            }
        });
    }

    /// Each copy of the float sums: the same additions in the same order (64 f32 lanes per
    /// 4096-value block, blocks in f64), so the same bits as the baseline; each lane adds at
    /// most 64 values, so the sum is within 64 f32 epsilons of Σ|x| of the exact one.
    #[test]
    fn sums_match_in_every_copy() {
        let mut inputs: Vec<Vec<f32>> = LENGTHS.iter().map(|&n| random(n, 2.0, n as u64)).collect();
        inputs.push(random(10_007, 1e6, 5));
        inputs.push(vec![]);
        inputs.push(vec![1.0, f32::INFINITY, 2.0]);
        inputs.push(vec![1.0, f32::INFINITY, f32::NEG_INFINITY]);
        inputs.push([3.0, f32::NAN].repeat(40));
        for x in &inputs {
            let exact: f64 = x.iter().map(|&v| v as f64).sum();
            let magnitude: f64 = x.iter().map(|&v| (v as f64).abs()).sum();
            let got = partial_wide_at(128, x);
            let close = (got - exact).abs() <= 64.0 * f32::EPSILON as f64 * magnitude;
            assert!(
                close || got == exact || (got.is_nan() && exact.is_nan()),
                "sum of {} values: {got}, exactly {exact}",
                x.len()
            );
        }
        for_each_width(|w| {
            for x in &inputs {
                let (got, baseline) = (partial_wide_at(w, x), partial_wide_at(128, x));
                assert!(
                    got.to_bits() == baseline.to_bits() || (got.is_nan() && baseline.is_nan()),
                    "{w}-bit copy, {} values: {got}, the baseline {baseline}",
                    x.len()
                );
                let ints: Vec<i64> = x.iter().map(|&v| (v * 1e3) as i64).collect();
                let want = ints.iter().fold(0i64, |a, &b| a.wrapping_add(b));
                assert_eq!(partial_wide_at(w, &ints), want, "{w}-bit copy, i64");
            }
        });
    }
}
