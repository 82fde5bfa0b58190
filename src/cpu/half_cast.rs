//! Contiguous conversions between f32 and the half types, the casts mixed precision lives on.
//! f16 uses the CPU's conversion instructions (AVX-512: 16 values each; F16C: 8), which round
//! to nearest even and keep subnormals, infinities and NaN as IEEE 754 says; bf16 is integer
//! arithmetic on the bits that the compiler vectorises. Both give exactly what the `half`
//! crate's scalar conversions give (tested over random bit patterns and the special values).

use half::{bf16, f16};

#[cfg(target_arch = "x86_64")]
use super::vector_width;
use super::wide;

pub fn f32_to_f16(s: &[f32], o: &mut [f16]) {
    #[cfg(target_arch = "x86_64")]
    let wide: &[Convert<f32, f16>] = &[x86::f32_to_f16_x16, x86::f32_to_f16_x8];
    #[cfg(not(target_arch = "x86_64"))]
    let wide = &[];
    convert(s, o, wide, f16::from_f32);
}

pub fn f16_to_f32(s: &[f16], o: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    let wide: &[Convert<f16, f32>] = &[x86::f16_to_f32_x16, x86::f16_to_f32_x8];
    #[cfg(not(target_arch = "x86_64"))]
    let wide = &[];
    convert(s, o, wide, f16::to_f32);
}

/// A vector conversion (AVX-512 or F16C): converts a prefix of the values, says how many.
type Convert<S, D> = unsafe fn(&[S], &mut [D]) -> usize;

/// Converts with the widest conversion the CPU has (`wide`: the AVX-512 one, then the F16C
/// one), then the rest one value at a time.
fn convert<S: Copy, D>(s: &[S], o: &mut [D], wide: &[Convert<S, D>], one: impl Fn(S) -> D) {
    assert_eq!(s.len(), o.len());
    #[cfg(target_arch = "x86_64")]
    let done = match (vector_width(), wide) {
        // SAFETY: the CPU has the instructions (checked by `vector_width`), and each
        // conversion stays within the slices' common length.
        (512, [x16, ..]) => unsafe { x16(s, o) },
        (256, [_, x8, ..]) => unsafe { x8(s, o) },
        _ => 0,
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = {
        let _ = wide;
        0
    };
    for (o, &s) in o[done..].iter_mut().zip(&s[done..]) {
        *o = one(s);
    }
}

/// Round to nearest even on the upper 16 bits; a NaN stays a (quiet) NaN.
#[inline(always)]
fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    // Wraps only for NaN bit patterns, whose result is not used.
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
    let nan = (b >> 16) | 0x40;
    (if b & 0x7fff_ffff > 0x7f80_0000 {
        nan
    } else {
        rounded
    }) as u16
}

pub fn f32_to_bf16(s: &[f32], o: &mut [bf16]) {
    wide(|| {
        for (o, &s) in o.iter_mut().zip(s) {
            *o = bf16::from_bits(bf16_bits(s));
        }
    })
}

pub fn bf16_to_f32(s: &[bf16], o: &mut [f32]) {
    wide(|| {
        for (o, &s) in o.iter_mut().zip(s) {
            *o = f32::from_bits((s.to_bits() as u32) << 16);
        }
    })
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use half::f16;

    /// Round to nearest even, and raise no floating-point exceptions.
    const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

    /// Outputs at least this long are written around the cache (`_mm256_stream_si256`): a plain
    /// store first reads every line it fills, a third more memory traffic for this cast.
    const STREAM_MIN: usize = 1 << 20;

    /// Converts a prefix of the values; returns how many (the caller does the rest).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
    pub fn f32_to_f16_x16(s: &[f32], o: &mut [f16]) -> usize {
        let n = s.len().min(o.len());
        let stream = n >= STREAM_MIN;
        // Streaming stores need 32-byte aligned addresses: a few values one at a time first.
        let head = if stream {
            ((32 - o.as_ptr() as usize % 32) % 32 / 2).min(n)
        } else {
            0
        };
        for i in 0..head {
            o[i] = f16::from_f32(s[i]);
        }
        let end = head + (n - head) / 16 * 16;
        for i in (head..end).step_by(16) {
            // SAFETY: `i + 16 <= end <= n`, within both slices; a streamed store's address is
            // 32-byte aligned (`head` above, and steps of 32 bytes).
            unsafe {
                let h = _mm512_cvtps_ph::<NEAREST>(_mm512_loadu_ps(s.as_ptr().add(i)));
                let at = o.as_mut_ptr().add(i) as *mut __m256i;
                if stream {
                    _mm256_stream_si256(at, h);
                } else {
                    _mm256_storeu_si256(at, h);
                }
            }
        }
        if stream {
            // Streamed stores are weakly ordered: make them visible before returning.
            _mm_sfence();
        }
        end
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn f32_to_f16_x8(s: &[f32], o: &mut [f16]) -> usize {
        let n = s.len().min(o.len()) / 8 * 8;
        for i in (0..n).step_by(8) {
            // SAFETY: as above.
            unsafe {
                let v = _mm256_loadu_ps(s.as_ptr().add(i));
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm_storeu_si128(o.as_mut_ptr().add(i) as *mut __m128i, h);
            }
        }
        n
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
    pub fn f16_to_f32_x16(s: &[f16], o: &mut [f32]) -> usize {
        let n = s.len().min(o.len()) / 16 * 16;
        for i in (0..n).step_by(16) {
            // SAFETY: as above.
            unsafe {
                let h = _mm256_loadu_si256(s.as_ptr().add(i) as *const __m256i);
                _mm512_storeu_ps(o.as_mut_ptr().add(i), _mm512_cvtph_ps(h));
            }
        }
        n
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn f16_to_f32_x8(s: &[f16], o: &mut [f32]) -> usize {
        let n = s.len().min(o.len()) / 8 * 8;
        for i in (0..n).step_by(8) {
            // SAFETY: as above.
            unsafe {
                let h = _mm_loadu_si128(s.as_ptr().add(i) as *const __m128i);
                _mm256_storeu_ps(o.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Random bit patterns (every class of float) and the values at the edges of each format.
    fn inputs() -> Vec<f32> {
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(3);
        let mut v: Vec<f32> = (0..100_003).map(|_| f32::from_bits(rng.random())).collect();
        v.extend((0..20_000).map(|i| (i as f32 - 10_000.0) * 7.3));
        v.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::MIN_POSITIVE,
            1e-8,
            5.96e-8,
            2.98e-8,
            65504.0,
            65519.99,
            65520.0,
            f32::MAX,
            f32::from_bits(0x3f80_8000), // a bf16 tie: rounds to even
            f32::from_bits(0x3f81_8000),
        ]);
        v
    }

    fn same_bits<T: PartialEq + std::fmt::Debug>(got: &[T], want: &[T], input: &[f32]) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g, w, "input {:?} ({:#x})", input[i], input[i].to_bits());
        }
    }

    /// Both directions of one half type against its scalar conversions, bit for bit.
    fn matches_scalar<H: Copy + Default>(
        to_half: fn(&[f32], &mut [H]),
        to_f32: fn(&[H], &mut [f32]),
        one: fn(f32) -> H,
        one_back: fn(H) -> f32,
        bits: fn(H) -> u16,
    ) {
        let s = inputs();
        let mut o = vec![H::default(); s.len()];
        to_half(&s, &mut o);
        let want: Vec<u16> = s.iter().map(|&x| bits(one(x))).collect();
        let got: Vec<u16> = o.iter().map(|&h| bits(h)).collect();
        same_bits(&got, &want, &s);
        let mut back = vec![0.0f32; o.len()];
        to_f32(&o, &mut back);
        let want: Vec<u32> = o.iter().map(|&h| one_back(h).to_bits()).collect();
        let got: Vec<u32> = back.iter().map(|x| x.to_bits()).collect();
        same_bits(&got, &want, &s);
    }

    #[test]
    fn half_casts_match_the_scalar_conversions_bit_for_bit() {
        let (f16_bits, bf16_bits) = (f16::to_bits, bf16::to_bits);
        matches_scalar(f32_to_f16, f16_to_f32, f16::from_f32, f16::to_f32, f16_bits);
        matches_scalar(
            f32_to_bf16,
            bf16_to_f32,
            bf16::from_f32,
            bf16::to_f32,
            bf16_bits,
        );
    }

    #[test]
    fn large_f16_casts_stream_from_any_alignment() {
        // Past the streaming threshold, into an output that starts off a 32-byte boundary.
        let base = inputs();
        let s: Vec<f32> = base.iter().cycle().take((1 << 20) + 37).copied().collect();
        let mut out = vec![f16::ZERO; s.len() + 3];
        f32_to_f16(&s, &mut out[3..]);
        let want: Vec<u16> = s.iter().map(|&x| f16::from_f32(x).to_bits()).collect();
        let got: Vec<u16> = out[3..].iter().map(|h| h.to_bits()).collect();
        same_bits(&got, &want, &s);
        assert!(out[..3].iter().all(|h| h.to_bits() == 0));
    }
}
