//! Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", 2011), the
//! counter-based generator behind PyTorch's CUDA generator and cuRAND: a 128-bit counter and a
//! 64-bit key give four 32-bit words, each block independent of every other. `kernels/random.cu`
//! computes the same function on the GPU.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// The four words of the block at `counter` under `key`.
#[inline(always)]
pub fn philox(counter: [u32; 4], key: u64) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = counter;
    let (mut k0, mut k1) = (key as u32, (key >> 32) as u32);
    for round in 0..10 {
        if round > 0 {
            k0 = k0.wrapping_add(W0);
            k1 = k1.wrapping_add(W1);
        }
        let (p0, p1) = (M0 as u64 * c0 as u64, M1 as u64 * c2 as u64);
        (c0, c1, c2, c3) = (
            (p1 >> 32) as u32 ^ c1 ^ k0,
            p1 as u32,
            (p0 >> 32) as u32 ^ c3 ^ k1,
            p0 as u32,
        );
    }
    [c0, c1, c2, c3]
}

/// Groups computed side by side: `LANES` counters, two AVX2 registers of eight (`blocks_avx2`).
pub const LANES: usize = 16;

/// The blocks of groups `first..first + LANES` (counter `(g, g >> 32, 0, 0)`), as
/// `words[j][lane]`: word `j` of group `first + lane`.
#[inline(always)]
pub fn groups(first: u64, key: u64) -> [[u32; LANES]; 4] {
    let g = |lane: usize| first.wrapping_add(lane as u64);
    let low = std::array::from_fn(|l| g(l) as u32);
    let high = std::array::from_fn(|l| (g(l) >> 32) as u32);
    blocks([low, high, [0; LANES], [0; LANES]], key)
}

/// The blocks at `LANES` counters side by side: `counters[j][lane]` is word `j` of the counter
/// of lane `lane`, and the result is laid out the same way.
#[inline(always)]
pub fn blocks(counters: [[u32; LANES]; 4], key: u64) -> [[u32; LANES]; 4] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked above.
        return unsafe { blocks_avx2(counters, key) };
    }
    blocks_portable(counters, key)
}

/// `blocks` one lane at a time, where the CPU has no AVX2.
#[inline(always)]
fn blocks_portable(counters: [[u32; LANES]; 4], key: u64) -> [[u32; LANES]; 4] {
    let lanes: [[u32; 4]; LANES] =
        std::array::from_fn(|l| philox(std::array::from_fn(|j| counters[j][l]), key));
    std::array::from_fn(|j| std::array::from_fn(|l| lanes[l][j]))
}

/// `blocks` eight lanes to a register. A 32 × 32-bit product's halves come from two multiplies
/// of the even and the odd lanes and two blends: the compiler's own vectorisation of the loop
/// repacks them with cross-lane shuffles instead, at twice the cost.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn blocks_avx2(counters: [[u32; LANES]; 4], key: u64) -> [[u32; LANES]; 4] {
    use std::arch::x86_64::*;
    // The high and low halves of `m * c` in each lane, `m` the same in all lanes.
    let mulhilo = |m: __m256i, c: __m256i| {
        let even = _mm256_mul_epu32(m, c);
        let odd = _mm256_mul_epu32(m, _mm256_srli_epi64::<32>(c));
        (
            _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(even), odd),
            _mm256_blend_epi32::<0b1010_1010>(even, _mm256_slli_epi64::<32>(odd)),
        )
    };
    let (m0, m1) = (_mm256_set1_epi32(M0 as i32), _mm256_set1_epi32(M1 as i32));
    let mut out = [[0u32; LANES]; 4];
    for half in 0..LANES / 8 {
        // SAFETY: each word holds LANES lanes: eight from `8 * half` are in bounds.
        let load =
            |w: &[u32; LANES]| unsafe { _mm256_loadu_si256(w.as_ptr().add(8 * half).cast()) };
        let [mut c0, mut c1, mut c2, mut c3] = counters.each_ref().map(load);
        let (mut k0, mut k1) = (key as u32, (key >> 32) as u32);
        for round in 0..10 {
            if round > 0 {
                k0 = k0.wrapping_add(W0);
                k1 = k1.wrapping_add(W1);
            }
            let ((hi0, lo0), (hi1, lo1)) = (mulhilo(m0, c0), mulhilo(m1, c2));
            let (key0, key1) = (_mm256_set1_epi32(k0 as i32), _mm256_set1_epi32(k1 as i32));
            (c0, c1, c2, c3) = (
                _mm256_xor_si256(_mm256_xor_si256(hi1, c1), key0),
                lo1,
                _mm256_xor_si256(_mm256_xor_si256(hi0, c3), key1),
                lo0,
            );
        }
        for (word, c) in out.iter_mut().zip([c0, c1, c2, c3]) {
            // SAFETY: as for the loads.
            unsafe { _mm256_storeu_si256(word.as_mut_ptr().add(8 * half).cast(), c) };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_gives_random123s_known_answers() {
        // Random123's kat_vectors for philox4x32-10 (counter, key, output).
        let cases: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
            (
                [0; 4],
                [0; 2],
                [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8],
            ),
            (
                [u32::MAX; 4],
                [u32::MAX; 2],
                [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
            ),
            (
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0],
                [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
            ),
        ];
        for (counter, [k0, k1], want) in cases {
            assert_eq!(philox(counter, (k1 as u64) << 32 | k0 as u64), want);
        }
    }

    #[test]
    fn the_vector_copies_compute_the_same_blocks() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u32
        };
        for _ in 0..100 {
            let counters: [[u32; LANES]; 4] =
                std::array::from_fn(|_| std::array::from_fn(|_| next()));
            let key = (next() as u64) << 32 | next() as u64;
            let want = blocks_portable(counters, key);
            assert_eq!(blocks(counters, key), want);
            for lane in 0..LANES {
                let one = philox(std::array::from_fn(|j| counters[j][lane]), key);
                assert_eq!(one, std::array::from_fn(|j| want[j][lane]));
            }
        }
    }

    #[test]
    fn groups_side_by_side_are_the_groups_one_at_a_time() {
        let key = 0x0123_4567_89ab_cdef;
        // Across the 2^32 boundary of the counter's low word.
        let first = (1u64 << 32) - 5;
        let words = groups(first, key);
        for (lane, g) in (first..first + LANES as u64).enumerate() {
            let one = philox([g as u32, (g >> 32) as u32, 0, 0], key);
            assert_eq!(one, std::array::from_fn(|j| words[j][lane]), "lane {lane}");
        }
    }
}
