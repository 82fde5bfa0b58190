//! Random fills for `rand` and `randn`, in parallel and still reproducible: the values are cut
//! into blocks of `BLOCK`, and block `b` is drawn from its own xoshiro256++ stream seeded with
//! `(seed, b)` through SplitMix64. The result depends only on the seed, never on how many
//! threads drew it. Normals come from rand_distr's ziggurat (`StandardNormal`), uniforms from
//! `StandardUniform` (`[0, 1)`).

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal, StandardUniform};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::chunked;

/// Values per independent stream.
pub const BLOCK: usize = 1 << 14;

/// The stream of block `b` of a fill seeded with `seed`.
fn stream(seed: u64, block: usize) -> Xoshiro256PlusPlus {
    // Distinct seeds for distinct blocks; SplitMix64 (inside `seed_from_u64`) decorrelates them.
    Xoshiro256PlusPlus::seed_from_u64(seed ^ (block as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Fills `out` with standard normal (`normal`) or uniform `[0, 1)` samples drawn from `seed`.
pub fn fill<T>(out: &mut [T], seed: u64, normal: bool)
where
    T: Send,
    StandardNormal: Distribution<T>,
    StandardUniform: Distribution<T>,
{
    chunked(out, BLOCK, |start, chunk| {
        for (i, block) in chunk.chunks_mut(BLOCK).enumerate() {
            let mut rng = stream(seed, start / BLOCK + i);
            for v in block {
                *v = if normal {
                    rng.sample(StandardNormal)
                } else {
                    rng.sample(StandardUniform)
                };
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_values_depend_on_the_seed_only() {
        let n = 3 * BLOCK + 17;
        let mut a = vec![0.0f32; n];
        fill(&mut a, 42, true);
        // The same blocks drawn one at a time, on one thread.
        let mut b = vec![0.0f32; n];
        for (i, block) in b.chunks_mut(BLOCK).enumerate() {
            let mut rng = stream(42, i);
            block
                .iter_mut()
                .for_each(|v| *v = rng.sample(StandardNormal));
        }
        assert_eq!(a, b);
        let mut c = vec![0.0f32; n];
        fill(&mut c, 43, true);
        assert_ne!(a, c);
        let mean = a.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let var = a.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(
            mean.abs() < 0.02 && (var - 1.0).abs() < 0.03,
            "{mean} {var}"
        );
    }
}
