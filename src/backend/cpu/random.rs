//! Random fills for `rand` and `randn`, in parallel and still reproducible: the values are cut
//! into blocks of `BLOCK`, and block `b` is drawn from its own xoshiro256++ stream seeded with
//! `(seed, b)` through SplitMix64. The result depends only on the seed, never on how many
//! threads drew it.
//!
//! f32, the default dtype, has its own samplers, two values from each 64-bit draw:
//! - uniform `[0, 1)`: each 32-bit half gives 24 random mantissa bits (`k / 2^24`);
//! - normal: Marsaglia and Tsang's ziggurat with 128 layers (`Ziggurat`). Each 32-bit half is
//!   split into independent fields: 7 bits pick the layer, 1 bit the sign and 24 bits the
//!   position in the layer. About 97% of values are accepted by one comparison; the others (a
//!   point in a wedge, or past the tail's start at 3.44) are finished with the full algorithm
//!   after the fast pass over their run of 1024 values, in order, from the same stream, so a
//!   block's values are still a function of its seed alone.
//!
//! f64 uses rand_distr's 256-layer ziggurat (`StandardNormal`) and `StandardUniform` (53 bits).

use std::sync::OnceLock;

use rand::{Rng, RngCore, SeedableRng};
use rand_distr::{Open01, StandardNormal, StandardUniform};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::chunked;

/// Values per independent stream.
pub const BLOCK: usize = 1 << 14;

/// The stream of block `b` of a fill seeded with `seed`.
fn stream(seed: u64, block: usize) -> Xoshiro256PlusPlus {
    // Distinct seeds for distinct blocks; SplitMix64 (inside `seed_from_u64`) decorrelates them.
    Xoshiro256PlusPlus::seed_from_u64(seed ^ (block as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// A dtype `rand`/`randn` can fill: how one block is drawn from its stream.
pub trait Sample: Sized + Send {
    fn fill_block(rng: &mut Xoshiro256PlusPlus, block: &mut [Self], normal: bool);
}

impl Sample for f64 {
    fn fill_block(rng: &mut Xoshiro256PlusPlus, block: &mut [f64], normal: bool) {
        for v in block {
            *v = if normal {
                rng.sample(StandardNormal)
            } else {
                rng.sample(StandardUniform)
            };
        }
    }
}

impl Sample for f32 {
    fn fill_block(rng: &mut Xoshiro256PlusPlus, block: &mut [f32], normal: bool) {
        if normal {
            Ziggurat::get().fill(rng, block);
        } else {
            fill_uniform_f32(rng, block);
        }
    }
}

/// Fills `out` with standard normal (`normal`) or uniform `[0, 1)` samples drawn from `seed`.
pub fn fill<T: Sample>(out: &mut [T], seed: u64, normal: bool) {
    chunked(out, BLOCK, |start, chunk| {
        for (i, block) in chunk.chunks_mut(BLOCK).enumerate() {
            T::fill_block(&mut stream(seed, start / BLOCK + i), block, normal);
        }
    });
}

/// 2^-24: the spacing of the 24-bit fractions the f32 samplers use.
const INV_2_24: f32 = 1.0 / (1u32 << 24) as f32;

/// The two 32-bit halves of one draw.
fn halves(r: u64) -> [u32; 2] {
    [r as u32, (r >> 32) as u32]
}

fn fill_uniform_f32(rng: &mut Xoshiro256PlusPlus, block: &mut [f32]) {
    let mut pairs = block.chunks_exact_mut(2);
    for pair in &mut pairs {
        let [a, b] = halves(rng.next_u64());
        pair[0] = (a >> 8) as f32 * INV_2_24;
        pair[1] = (b >> 8) as f32 * INV_2_24;
    }
    if let [last] = pairs.into_remainder() {
        *last = (rng.next_u64() >> 40) as f32 * INV_2_24;
    }
}

const LAYERS: usize = 128;
/// Where the tail begins, and the area of each layer (Marsaglia and Tsang 2000, 128 layers).
const TAIL_START: f64 = 3.442619855899;
const LAYER_AREA: f64 = 9.91256303526217e-3;

/// The unnormalised normal density, `exp(-x²/2)`.
fn density(x: f64) -> f64 {
    (-0.5 * x * x).exp()
}

/// The ziggurat's tables. Layer `i` is the box `[0, x[i]] × [f[i], f[i+1]]`; the base layer
/// (`i = 0`) has the width that gives it the area of the others with the tail folded in.
struct Ziggurat {
    /// A 24-bit position `u` in layer `i` is under the density everywhere when `u < accept[i]`.
    accept: [u32; LAYERS],
    /// `±x[i] / 2^24`, indexed by the draw's low 8 bits (layer and sign): the value of position
    /// `u` is `u * scale[h & 0xff]`. The sign lives in the table so that no branch depends on a
    /// random bit.
    scale: [f32; 2 * LAYERS],
    x: [f64; LAYERS + 1],
    f: [f64; LAYERS + 1],
}

impl Ziggurat {
    fn get() -> &'static Ziggurat {
        static TABLES: OnceLock<Ziggurat> = OnceLock::new();
        TABLES.get_or_init(Ziggurat::build)
    }

    fn build() -> Ziggurat {
        let mut x = [0.0f64; LAYERS + 1];
        x[0] = LAYER_AREA / density(TAIL_START);
        x[1] = TAIL_START;
        for i in 2..LAYERS {
            x[i] = (-2.0 * (LAYER_AREA / x[i - 1] + density(x[i - 1])).ln()).sqrt();
        }
        x[LAYERS] = 0.0;
        let f = x.map(density);
        let span = (1u64 << 24) as f64;
        Ziggurat {
            accept: std::array::from_fn(|i| (x[i + 1] / x[i] * span) as u32),
            scale: std::array::from_fn(|i| {
                let sign = if i & 0x80 != 0 { -1.0 } else { 1.0 };
                (sign * x[i & 0x7f] / span) as f32
            }),
            x,
            f,
        }
    }

    /// The fast pass over each run of `RUN` values: every value from one comparison, the
    /// others' positions and draws kept; then those finished with the full algorithm, from the
    /// same stream, in order. No call and no branch on the kept ones in the fast loop.
    fn fill(&self, rng: &mut Xoshiro256PlusPlus, block: &mut [f32]) {
        const RUN: usize = 1024;
        // A local copy keeps the generator's state in registers.
        let mut local = rng.clone();
        let mut kept_at = [0u16; RUN];
        let mut kept_draw = [0u32; RUN];
        for run in block.chunks_mut(RUN) {
            let mut kept = 0;
            let mut pairs = run.chunks_exact_mut(2);
            for (i, pair) in (&mut pairs).enumerate() {
                for (k, (v, h)) in pair.iter_mut().zip(halves(local.next_u64())).enumerate() {
                    let (value, ok) = self.try_fast(h);
                    *v = value;
                    kept_at[kept] = (2 * i + k) as u16;
                    kept_draw[kept] = h;
                    kept += usize::from(!ok);
                }
            }
            if let [last] = pairs.into_remainder() {
                *last = self.finish(local.next_u32(), &mut local);
            }
            for (&at, &h) in kept_at[..kept].iter().zip(&kept_draw[..kept]) {
                run[at as usize] = self.finish(h, &mut local);
            }
        }
        *rng = local;
    }

    /// The value position `h` names, and whether it lies wholly under the density.
    #[inline(always)]
    fn try_fast(&self, h: u32) -> (f32, bool) {
        let u = h >> 8;
        let value = u as f32 * self.scale[(h & 0xff) as usize];
        (value, u < self.accept[(h & 0x7f) as usize])
    }

    /// The standard normal value that starts from draw `h`: `h`'s own point is accepted if it
    /// lies under the density (in a wedge, or in the tail); otherwise new draws follow.
    fn finish(&self, mut h: u32, rng: &mut Xoshiro256PlusPlus) -> f32 {
        loop {
            let (value, ok) = self.try_fast(h);
            if ok {
                return value;
            }
            let layer = (h & 0x7f) as usize;
            let sign = if h & 0x80 != 0 { -1.0 } else { 1.0 };
            if layer == 0 {
                // The tail beyond `TAIL_START` (Marsaglia 1964): exponential proposals.
                loop {
                    let a: f64 = rng.sample(Open01);
                    let b: f64 = rng.sample(Open01);
                    let x = -a.ln() / TAIL_START;
                    if -2.0 * b.ln() >= x * x {
                        return (sign * (TAIL_START + x)) as f32;
                    }
                }
            }
            // A wedge: accept under the curve, between the layer's bottom and top.
            let x = (h >> 8) as f64 * self.x[layer] / (1u64 << 24) as f64;
            let y: f64 = rng.sample(StandardUniform);
            if self.f[layer] + (self.f[layer + 1] - self.f[layer]) * y < density(x) {
                return (sign * x) as f32;
            }
            h = rng.next_u32();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments(a: &[f32]) -> [f64; 4] {
        let n = a.len() as f64;
        let mean = a.iter().map(|&v| v as f64).sum::<f64>() / n;
        let m = |k: i32| a.iter().map(|&v| (v as f64 - mean).powi(k)).sum::<f64>() / n;
        [mean, m(2), m(3), m(4)]
    }

    #[test]
    fn the_values_depend_on_the_seed_only() {
        let n = 3 * BLOCK + 17;
        let mut a = vec![0.0f32; n];
        fill(&mut a, 42, true);
        // The same blocks drawn one at a time, on one thread.
        let mut b = vec![0.0f32; n];
        for (i, block) in b.chunks_mut(BLOCK).enumerate() {
            f32::fill_block(&mut stream(42, i), block, true);
        }
        assert_eq!(a, b);
        let mut c = vec![0.0f32; n];
        fill(&mut c, 43, true);
        assert_ne!(a, c);
    }

    #[test]
    fn the_f32_ziggurat_draws_a_standard_normal() {
        let n = 4_000_000;
        let mut a = vec![0.0f32; n];
        fill(&mut a, 7, true);
        let [mean, var, skew, kurt] = moments(&a);
        // Standard errors at n = 4M: mean 5e-4, variance 7e-4, skew 1.2e-3, kurtosis 2.4e-3.
        assert!(mean.abs() < 3e-3, "mean {mean}");
        assert!((var - 1.0).abs() < 5e-3, "variance {var}");
        assert!((skew / var.powf(1.5)).abs() < 1e-2, "skew {skew}");
        assert!((kurt / (var * var) - 3.0).abs() < 3e-2, "kurtosis {kurt}");
        // The normal's CDF at a few points, the tail past the ziggurat's 3.44 included.
        for (z, p) in [
            (-2.0, 0.02275),
            (-1.0, 0.158655),
            (0.0, 0.5),
            (0.5, 0.691462),
        ] {
            let got = a.iter().filter(|&&v| (v as f64) < z).count() as f64 / n as f64;
            assert!((got - p).abs() < 2e-3, "P(x < {z}) = {got}, want {p}");
        }
        let tail = a.iter().filter(|&&v| v.abs() > 3.5).count() as f64 / n as f64;
        assert!((tail - 4.6525e-4).abs() < 6e-5, "P(|x| > 3.5) = {tail}");
        assert!(a.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn f32_uniforms_fill_zero_to_one() {
        let n = 1_000_003;
        let mut a = vec![0.0f32; n];
        fill(&mut a, 9, false);
        assert!(a.iter().all(|&v| (0.0..1.0).contains(&v)));
        let [mean, var, ..] = moments(&a);
        assert!((mean - 0.5).abs() < 2e-3 && (var - 1.0 / 12.0).abs() < 1e-3);
        let low = a.iter().filter(|&&v| v < 0.1).count() as f64 / n as f64;
        assert!((low - 0.1).abs() < 2e-3, "{low}");
    }

    #[test]
    fn f64_fills_still_use_rand_distr() {
        let mut a = vec![0.0f64; 1000];
        fill(&mut a, 5, true);
        let mut rng = stream(5, 0);
        let want: Vec<f64> = (0..1000).map(|_| rng.sample(StandardNormal)).collect();
        assert_eq!(a, want);
    }
}
