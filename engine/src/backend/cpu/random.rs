//! Random fills for `rand`, `randn` and `randint`, computed as `kernels/random.cu` computes them
//! on a GPU, so a seed gives the same tensor on every device. Each value is a function of the
//! seed and its index alone (Philox4x32-10, `philox.rs`): the fill is cut into pieces drawn in
//! parallel, and the result never depends on how many threads drew it.
//!
//! Group `g` is Philox's block at the counter `(g, g >> 32, 0, 0)` with the seed as its key,
//! four 32-bit words. An f32 takes one word, an f64 or an i64 two (the first the high half).
//! Sixteen groups (`LANES`) make a batch of 64 f32s or 32 f64s, laid out word by word: element
//! `16j + l` of batch `b` takes word `j` (f32) or words `2j`, `2j + 1` (f64) of group
//! `16b + l`, so consecutive elements come from consecutive groups, which the CPU computes side
//! by side in vectors and a GPU's threads side by side.
//! - uniform `[0, 1)`: the top 24 bits over 2^24 (f32), the top 53 over 2^53 (f64);
//! - normal: Marsaglia and Tsang's ziggurat with 256 layers, its tables written by `build.rs`
//!   for both backends (`kernels/ziggurat.rs`). The draw's low 8 bits pick the layer, bit 8 the
//!   sign, and the top 23 (f32) or 53 (f64) bits the position. 98.5% of values take one
//!   multiply and one comparison; the others (a point in a wedge, or past the tail's start at
//!   3.65) are finished after the fast pass from their own stream, the blocks at
//!   `(i, i >> 32, 1, attempt)` for element `i`.
//! - randint: `low + (64 bits mod (high − low))`, as PyTorch's CUDA `random_from_to`.

use super::philox::{self, LANES};
use super::{chunked, simd};

#[allow(clippy::unreadable_literal)]
mod tables {
    include!(concat!(env!("OUT_DIR"), "/random_tables.rs"));
}
use tables::{
    ZIG_ACCEPT32, ZIG_ACCEPT64, ZIG_F, ZIG_SCALE32, ZIG_SCALE64, ZIG_SHIFT32, ZIG_SHIFT64,
    ZIG_TAIL_START, ZIG_X,
};

/// Values per piece drawn on one thread. Any multiple of a batch (64 values) gives the same
/// values: a piece must start where a batch does.
pub const BLOCK: usize = 1 << 14;

/// A dtype `rand`/`randn` draw natively, and how one value comes from Philox's words.
pub trait Sample: Copy + Send + Sync {
    /// One value's random bits.
    type Draw: Copy;
    /// Values per Philox block.
    const PER_GROUP: usize;
    /// 2 to the number of position bits.
    const SPAN: f64;
    /// The `j`-th draw of the group in lane `lane` of `words` (`philox::groups`).
    fn draw(words: &Words, lane: usize, j: usize) -> Self::Draw;
    /// A draw after a refused wedge point, from the element's own block.
    fn redraw(r: [u32; 4]) -> Self::Draw;
    fn uniform(h: Self::Draw) -> Self;
    /// The value position `h` names, and whether it lies wholly under the density.
    fn fast(h: Self::Draw) -> (Self, bool);
    fn position(h: Self::Draw) -> f64;
    /// The draw's low 9 bits: the layer (8) and the sign (bit 8).
    fn low_bits(h: Self::Draw) -> usize;
    fn from_f64(v: f64) -> Self;
    /// The ziggurat's fast pass over one batch: writes every value of `piece` and the slots of
    /// those it refused into `refused`; returns how many it refused.
    #[inline(always)]
    fn fast_pass(words: &Words, piece: &mut [Self], refused: &mut [u8; 4 * LANES]) -> usize {
        fast_pass_scalar(words, piece, refused)
    }
}

/// A batch's Philox words, as `philox::groups` returns them.
type Words = [[u32; LANES]; 4];

/// The fast pass one value at a time, with no branch on a draw: each slot is noted as refused
/// or not by a counter's step.
#[inline(always)]
fn fast_pass_scalar<T: Sample>(
    words: &Words,
    piece: &mut [T],
    refused: &mut [u8; 4 * LANES],
) -> usize {
    let mut count = 0;
    for (k, v) in piece.iter_mut().enumerate() {
        let (value, ok) = T::fast(T::draw(words, k % LANES, k / LANES));
        *v = value;
        refused[count] = k as u8;
        count += usize::from(!ok);
    }
    count
}

impl Sample for f32 {
    type Draw = u32;
    const PER_GROUP: usize = 4;
    const SPAN: f64 = (1u64 << (32 - ZIG_SHIFT32)) as f64;
    #[inline(always)]
    fn draw(words: &Words, lane: usize, j: usize) -> u32 {
        words[j][lane]
    }
    fn redraw(r: [u32; 4]) -> u32 {
        r[2]
    }
    #[inline(always)]
    fn uniform(h: u32) -> f32 {
        (h >> 8) as f32 * (1.0 / (1u32 << 24) as f32)
    }
    #[inline(always)]
    fn fast(h: u32) -> (f32, bool) {
        let u = h >> ZIG_SHIFT32;
        (
            u as f32 * ZIG_SCALE32[(h & 0x1ff) as usize],
            u < ZIG_ACCEPT32[(h & 0xff) as usize],
        )
    }
    fn position(h: u32) -> f64 {
        (h >> ZIG_SHIFT32) as f64
    }
    fn low_bits(h: u32) -> usize {
        (h & 0x1ff) as usize
    }
    fn from_f64(v: f64) -> f32 {
        v as f32
    }
    #[inline(always)]
    fn fast_pass(words: &Words, piece: &mut [f32], refused: &mut [u8; 4 * LANES]) -> usize {
        #[cfg(target_arch = "x86_64")]
        if piece.len() == 4 * LANES && std::arch::is_x86_feature_detected!("avx2") {
            let piece: &mut [f32; 4 * LANES] = piece.try_into().expect("a whole batch");
            // SAFETY: the CPU has AVX2, checked above.
            return unsafe { fast_pass_f32_avx2(words, piece, refused) };
        }
        fast_pass_scalar(words, piece, refused)
    }
}

/// The f32 fast pass eight values at a time: both tables gathered, the refused slots read from
/// the comparison's mask. The same bits as `fast_pass_scalar`: the position converts to f32
/// exactly (it is below 2^24) and the product is one IEEE multiply either way.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn fast_pass_f32_avx2(
    words: &Words,
    piece: &mut [f32; 4 * LANES],
    refused: &mut [u8; 4 * LANES],
) -> usize {
    use std::arch::x86_64::*;
    let mut count = 0;
    for (j, row) in words.iter().enumerate() {
        for half in 0..LANES / 8 {
            let base = j * LANES + 8 * half;
            // SAFETY: `row` holds LANES words and `piece` 4 * LANES values: both accesses of 8
            // are in bounds, and every gathered index is below the table's length (0xff, 0x7f).
            let ok = unsafe {
                let h = _mm256_loadu_si256(row.as_ptr().add(8 * half).cast());
                let u = _mm256_srli_epi32::<{ ZIG_SHIFT32 as i32 }>(h);
                let sign_layer = _mm256_and_si256(h, _mm256_set1_epi32(0x1ff));
                let layer = _mm256_and_si256(h, _mm256_set1_epi32(0xff));
                let scale = _mm256_i32gather_ps::<4>(ZIG_SCALE32.as_ptr(), sign_layer);
                let accept = _mm256_i32gather_epi32::<4>(ZIG_ACCEPT32.as_ptr().cast(), layer);
                let values = _mm256_mul_ps(_mm256_cvtepi32_ps(u), scale);
                _mm256_storeu_ps(piece.as_mut_ptr().add(base), values);
                _mm256_cmpgt_epi32(accept, u)
            };
            let mut bad = !(_mm256_movemask_ps(_mm256_castsi256_ps(ok)) as u32) & 0xff;
            while bad != 0 {
                refused[count] = (base + bad.trailing_zeros() as usize) as u8;
                count += 1;
                bad &= bad - 1;
            }
        }
    }
    count
}

impl Sample for f64 {
    type Draw = u64;
    const PER_GROUP: usize = 2;
    const SPAN: f64 = (1u64 << (64 - ZIG_SHIFT64)) as f64;
    #[inline(always)]
    fn draw(words: &Words, lane: usize, j: usize) -> u64 {
        join(words[2 * j][lane], words[2 * j + 1][lane])
    }
    fn redraw(r: [u32; 4]) -> u64 {
        join(r[2], r[3])
    }
    #[inline(always)]
    fn uniform(h: u64) -> f64 {
        (h >> 11) as f64 / Self::SPAN
    }
    #[inline(always)]
    fn fast(h: u64) -> (f64, bool) {
        let u = h >> ZIG_SHIFT64;
        (
            u as f64 * ZIG_SCALE64[(h & 0x1ff) as usize],
            u < ZIG_ACCEPT64[(h & 0xff) as usize],
        )
    }
    fn position(h: u64) -> f64 {
        (h >> ZIG_SHIFT64) as f64
    }
    fn low_bits(h: u64) -> usize {
        (h & 0x1ff) as usize
    }
    fn from_f64(v: f64) -> f64 {
        v
    }
}

fn join(high: u32, low: u32) -> u64 {
    (high as u64) << 32 | low as u64
}

/// Fills `out` with standard normal (`normal`) or uniform `[0, 1)` samples drawn from `seed`.
pub fn fill<T: Sample>(out: &mut [T], seed: u64, normal: bool) {
    chunked(out, BLOCK, |start, piece| {
        fill_piece(start, piece, seed, normal)
    });
}

simd::vectorized! {
    /// Elements `start..start + out.len()` of a fill (`start` where a batch starts),
    /// `LANES` Philox blocks at a time in the widest vectors the CPU has. The ziggurat's fast
    /// pass has no branch on a draw: each value is written, and its slot noted as refused or
    /// not by a counter's step. The refused ones wait until `LANES` of them can have their
    /// first block of their own streams computed side by side, then are finished.
    fn fill_piece / fill_piece_at<T: Sample>(start: usize, out: &mut [T], seed: u64, normal: bool) -> () {
        let per = T::PER_GROUP;
        let step = LANES * per;
        debug_assert_eq!(start % step, 0, "a piece starts where a batch does");
        let mut pending: Vec<(usize, T::Draw)> = Vec::with_capacity(2 * step);
        let len = out.len();
        for at in (0..len).step_by(step) {
            let piece = &mut out[at..(at + step).min(len)];
            let first = start + at;
            let words = philox::groups((first / per) as u64, seed);
            let draw = |k: usize| T::draw(&words, k % LANES, k / LANES);
            if !normal {
                for (k, v) in piece.iter_mut().enumerate() {
                    *v = T::uniform(draw(k));
                }
                continue;
            }
            let mut refused = [0u8; 4 * LANES];
            let count = T::fast_pass(&words, piece, &mut refused);
            let slots = refused[..count].iter().map(|&k| usize::from(k));
            pending.extend(slots.map(|k| (first + k, draw(k))));
            if pending.len() >= LANES {
                finish_pending(&mut pending, start, out, seed);
            }
        }
        finish_pending(&mut pending, start, out, seed);
    }
}

/// Finishes the refused values `pending` (element index, draw) into `out` (whose first element
/// is element `start`), computing their first blocks `LANES` at a time; empties `pending`.
#[inline(always)]
fn finish_pending<T: Sample>(
    pending: &mut Vec<(usize, T::Draw)>,
    start: usize,
    out: &mut [T],
    seed: u64,
) {
    for batch in pending.chunks(LANES) {
        let index = |l: usize| batch.get(l).map_or(0, |&(i, _)| i as u64);
        let low = std::array::from_fn(|l| index(l) as u32);
        let high = std::array::from_fn(|l| (index(l) >> 32) as u32);
        let firsts = philox::blocks([low, high, [1; LANES], [0; LANES]], seed);
        for (l, &(i, h)) in batch.iter().enumerate() {
            let r = std::array::from_fn(|j| firsts[j][l]);
            out[i - start] = finish::<T>(h, i as u64, seed, r);
        }
    }
    pending.clear();
}

/// 53 random bits as an f64 in `[0, 1)` (`unit53`) and in `(0, 1)` (`open53`).
fn unit53(high: u32, low: u32) -> f64 {
    (join(high, low) >> 11) as f64 / (1u64 << 53) as f64
}
fn open53(high: u32, low: u32) -> f64 {
    ((join(high, low) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// The normal that starts from draw `h` of element `i`, once `h`'s own point was refused: a
/// wedge point is accepted under the curve, a tail point by Marsaglia's exponential proposals
/// (1964); a refused wedge point is replaced by a new draw. `first` is the element's block at
/// attempt 0, `(i, i >> 32, 1, 0)`. Line for line `ziggurat_finish` of `kernels/random.cu`.
fn finish<T: Sample>(mut h: T::Draw, i: u64, seed: u64, first: [u32; 4]) -> T {
    let (mut r, mut attempt) = (first, 0u32);
    loop {
        let (value, ok) = T::fast(h);
        if ok {
            return value;
        }
        let layer = T::low_bits(h) & 0xff;
        let sign = if T::low_bits(h) & 0x100 != 0 {
            -1.0
        } else {
            1.0
        };
        if attempt > 0 {
            r = philox::philox([i as u32, (i >> 32) as u32, 1, attempt], seed);
        }
        attempt += 1;
        if layer == 0 {
            let x = -open53(r[0], r[1]).ln() / ZIG_TAIL_START;
            if -2.0 * open53(r[2], r[3]).ln() >= x * x {
                return T::from_f64(sign * (ZIG_TAIL_START + x));
            }
            continue;
        }
        let x = T::position(h) * ZIG_X[layer] / T::SPAN;
        let (f0, f1) = (ZIG_F[layer], ZIG_F[layer + 1]);
        if f0 + (f1 - f0) * unit53(r[0], r[1]) < (-0.5 * x * x).exp() {
            return T::from_f64(sign * x);
        }
        h = T::redraw(r);
    }
}

/// Integers uniform in `low..high` (`low < high`) drawn from `seed`.
pub fn fill_int(out: &mut [i64], seed: u64, low: i64, high: i64) {
    let range = high.wrapping_sub(low) as u64;
    chunked(out, BLOCK, |start, chunk| {
        // Drawn as f64s are: two words a value.
        let step = LANES * 2;
        for (b, piece) in chunk.chunks_mut(step).enumerate() {
            let first = start + b * step;
            let words = philox::groups((first / 2) as u64, seed);
            for (k, v) in piece.iter_mut().enumerate() {
                let bits = <f64 as Sample>::draw(&words, k % LANES, k / LANES);
                *v = (low as u64).wrapping_add(bits % range) as i64;
            }
        }
    });
}

#[cfg(test)]
#[path = "random_tests.rs"]
mod tests;
