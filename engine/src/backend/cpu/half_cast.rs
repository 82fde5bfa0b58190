//! Contiguous conversions between f32 and the half types, the casts mixed precision lives on.
//! f16 uses the CPU's conversion instructions (AVX-512: 16 values each; F16C: 8), which round
//! to nearest even and keep subnormals, infinities and NaN as IEEE 754 says; bf16 is integer
//! arithmetic on the bits that the compiler vectorises. Every copy (baseline, F16C, AVX-512 with
//! its streaming stores) gives exactly what the `half` crate's scalar conversions give, and, for
//! f16, what a reference worked out in f64 gives (tested per copy, on every machine that can run
//! it, over random bit patterns, every half value and the special values).

use half::{bf16, f16};

use super::simd::{checked_width, vector_width, wide_at};

pub fn f32_to_f16(s: &[f32], o: &mut [f16]) {
    f32_to_f16_at(vector_width(), s, o)
}

pub fn f16_to_f32(s: &[f16], o: &mut [f32]) {
    f16_to_f32_at(vector_width(), s, o)
}

pub fn f32_to_bf16(s: &[f32], o: &mut [bf16]) {
    f32_to_bf16_at(vector_width(), s, o)
}

pub fn bf16_to_f32(s: &[bf16], o: &mut [f32]) {
    bf16_to_f32_at(vector_width(), s, o)
}

// The `_at` forms run the copy for `width`-bit vectors (`simd::WIDTHS`) whatever the CPU would
// pick, so that the tests check each one; they panic where the CPU cannot run that copy.

pub(crate) fn f32_to_f16_at(width: u32, s: &[f32], o: &mut [f16]) {
    #[cfg(target_arch = "x86_64")]
    let wide: &[Convert<f32, f16>] = &[x86::f32_to_f16_x16, x86::f32_to_f16_x8];
    #[cfg(not(target_arch = "x86_64"))]
    let wide = &[];
    convert(width, s, o, wide, f16::from_f32);
}

pub(crate) fn f16_to_f32_at(width: u32, s: &[f16], o: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    let wide: &[Convert<f16, f32>] = &[x86::f16_to_f32_x16, x86::f16_to_f32_x8];
    #[cfg(not(target_arch = "x86_64"))]
    let wide = &[];
    convert(width, s, o, wide, f16::to_f32);
}

/// A vector conversion (AVX-512 or F16C): converts a prefix of the values, says how many.
type Convert<S, D> = unsafe fn(&[S], &mut [D]) -> usize;

/// Converts with the conversion for `width` (`wide`: the AVX-512 one, then the F16C one; the
/// baseline has none), then the rest one value at a time.
fn convert<S: Copy, D>(
    width: u32,
    s: &[S],
    o: &mut [D],
    wide: &[Convert<S, D>],
    one: impl Fn(S) -> D,
) {
    assert_eq!(s.len(), o.len());
    let done = match (checked_width(width), wide) {
        // SAFETY: the CPU has the instructions (`checked_width`), and each conversion stays
        // within the slices' common length.
        (512, [x16, ..]) => unsafe { x16(s, o) },
        (256, [_, x8, ..]) => unsafe { x8(s, o) },
        _ => 0,
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

/// The f32 with `h`'s bits on top; a signalling NaN comes back quiet, as from `half` and the
/// strided cast (through f64), so that a tensor's values never depend on its layout.
#[inline(always)]
fn bf16_widened(h: u16) -> u32 {
    let b = (h as u32) << 16;
    if b & 0x7fff_ffff > 0x7f80_0000 {
        b | 0x0040_0000
    } else {
        b
    }
}

pub(crate) fn f32_to_bf16_at(width: u32, s: &[f32], o: &mut [bf16]) {
    wide_at(width, || {
        for (o, &s) in o.iter_mut().zip(s) {
            *o = bf16::from_bits(bf16_bits(s));
        }
    })
}

pub(crate) fn bf16_to_f32_at(width: u32, s: &[bf16], o: &mut [f32]) {
    wide_at(width, || {
        for (o, &s) in o.iter_mut().zip(s) {
            *o = f32::from_bits(bf16_widened(s.to_bits()));
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
    pub(super) const STREAM_MIN: usize = 1 << 20;

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
pub(super) mod tests {
    use super::super::simd::for_each_width;
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Random bit patterns (every class of float) and the values at the edges of each format.
    pub(in crate::backend::cpu) fn inputs() -> Vec<f32> {
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(3);
        let mut v: Vec<f32> = (0..100_003).map(|_| f32::from_bits(rng.random())).collect();
        v.extend((0..20_000).map(|i| (i as f32 - 10_000.0) * 7.3));
        // Every f16 value and every midpoint between neighbours (ties: round to even).
        v.extend((0..=u16::MAX).map(f16_reference_to_f32));
        v.extend((0..0x7bffu16).map(|h| {
            let (a, b) = (f16_reference_to_f32(h), f16_reference_to_f32(h + 1));
            ((a as f64 + b as f64) / 2.0) as f32 // exact: f32 has 13 more mantissa bits
        }));
        v.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001), // signalling NaNs, with and without high payload bits
            f32::from_bits(0xffa0_0000),
            f32::from_bits(1), // f32 subnormals
            f32::from_bits(0x807f_ffff),
            f32::MIN_POSITIVE,
            1e-8,
            5.96e-8,
            2.98e-8,
            2.0f32.powi(-25), // half the smallest f16 subnormal: a tie, rounds to 0
            3.0 * 2.0f32.powi(-26),
            65504.0,
            65519.99,
            65520.0, // a tie between f16's largest and 2^16: rounds to infinity
            -65520.0,
            1e6, // out of f16 range
            f32::MAX,
            f32::MIN,
            f32::from_bits(0x3f80_8000), // a bf16 tie: rounds to even
            f32::from_bits(0x3f81_8000),
            f32::from_bits(0x7f7f_ffff), // rounds to bf16 infinity
        ]);
        v
    }

    /// f32 → f16 bits worked out in f64, apart from the `half` crate (which itself uses F16C
    /// where the CPU has it): round to nearest, ties to even, at the quantum of the value's
    /// binade; a NaN becomes quiet, keeping its sign and top payload bits (as VCVTPS2PH does).
    fn f16_reference(x: f32) -> u16 {
        let bits = x.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        if x.is_nan() {
            return sign | 0x7e00 | ((bits >> 13) & 0x3ff) as u16;
        }
        // The binade's exponent, at least f16's smallest normal one (subnormals share its
        // quantum, 2^-24); the encoding then counts quanta from zero, carrying into the exponent.
        let e = (((bits >> 23) & 0xff) as i32 - 127).max(-14);
        let quanta = ((x as f64).abs() / 2f64.powi(e - 10)).round_ties_even();
        let code = (e + 14) as f64 * 1024.0 + quanta;
        sign | code.min(0x7c00 as f64) as u16 // past the largest finite f16: infinity
    }

    /// f16 bits → f32, exactly (every f16 is an f32); a NaN comes back quiet.
    fn f16_reference_to_f32(h: u16) -> f32 {
        let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
        let (e, m) = ((h >> 10) & 0x1f, (h & 0x3ff) as f64);
        match e {
            0x1f if m == 0.0 => sign as f32 * f32::INFINITY,
            0x1f => {
                f32::from_bits(((h as u32) << 16 & 0x8000_0000) | 0x7fc0_0000 | (m as u32) << 13)
            }
            0 => (sign * m * 2f64.powi(-24)) as f32,
            _ => (sign * (1024.0 + m) * 2f64.powi(e as i32 - 25)) as f32,
        }
    }

    pub(in crate::backend::cpu) fn same_bits<T: PartialEq + std::fmt::Debug>(
        got: &[T],
        want: &[T],
        what: impl Fn(usize) -> String,
    ) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g, w, "{}", what(i));
        }
    }

    type Cast<S, D> = fn(u32, &[S], &mut [D]);

    /// `cast` in the copy for `width` against `want` bit for bit, over the whole of `s`, over
    /// short lengths (none a multiple of 8 or 16 but some, so each copy ends in its scalar
    /// tail) and from unaligned starts.
    fn cast_matches<
        S: Copy + std::fmt::Debug,
        D: Copy + Default,
        B: PartialEq + std::fmt::Debug,
    >(
        width: u32,
        cast: Cast<S, D>,
        s: &[S],
        want: impl Fn(S) -> B,
        bits: impl Fn(D) -> B,
    ) {
        let check = |s: &[S]| {
            let mut o = vec![D::default(); s.len()];
            cast(width, s, &mut o);
            let got: Vec<B> = o.iter().map(|&d| bits(d)).collect();
            let want: Vec<B> = s.iter().map(|&x| want(x)).collect();
            same_bits(&got, &want, |i| {
                format!("{width}-bit copy, length {}, input {:?}", s.len(), s[i])
            });
        };
        check(s);
        for start in 0..3 {
            for len in 0..=40 {
                check(&s[start..start + len]);
            }
        }
    }

    /// Each copy of each cast, bit for bit against the references.
    #[test]
    fn half_casts_match_the_scalar_conversions_bit_for_bit_in_every_copy() {
        let s = inputs();
        let all_f16: Vec<f16> = (0..=u16::MAX)
            .map(f16::from_bits)
            .chain([f16::ONE; 5])
            .collect();
        let all_bf16: Vec<bf16> = (0..=u16::MAX)
            .map(bf16::from_bits)
            .chain([bf16::ONE; 5])
            .collect();
        for_each_width(|w| {
            cast_matches(w, f32_to_f16_at, &s, f16_reference, f16::to_bits);
            cast_matches(
                w,
                f32_to_f16_at,
                &s,
                |x| f16::from_f32(x).to_bits(),
                f16::to_bits,
            );
            let widened = |h: f16| f16_reference_to_f32(h.to_bits()).to_bits();
            cast_matches(w, f16_to_f32_at, &all_f16, widened, f32::to_bits);
            cast_matches(
                w,
                f16_to_f32_at,
                &all_f16,
                |h| h.to_f32().to_bits(),
                f32::to_bits,
            );
            cast_matches(
                w,
                f32_to_bf16_at,
                &s,
                |x| bf16::from_f32(x).to_bits(),
                bf16::to_bits,
            );
            cast_matches(
                w,
                bf16_to_f32_at,
                &all_bf16,
                |h| h.to_f32().to_bits(),
                f32::to_bits,
            );
        });
    }

    #[test]
    fn large_f16_casts_stream_from_any_alignment_in_every_copy() {
        // Past the AVX-512 copy's streaming threshold, into outputs that start on a 32-byte
        // boundary (streamed from the first value) and off one (a scalar head first); the other
        // copies get the same lengths and starts.
        let base = inputs();
        let s: Vec<f32> = base.iter().cycle().take((1 << 20) + 37).copied().collect();
        #[cfg(target_arch = "x86_64")]
        assert!(s.len() > x86::STREAM_MIN);
        let want: Vec<u16> = s.iter().map(|&x| f16_reference(x)).collect();
        for_each_width(|w| {
            let mut out = vec![f16::ZERO; s.len() + 32];
            let aligned = (32 - out.as_ptr() as usize % 32) % 32 / 2;
            for offset in [aligned, aligned + 3, aligned + 8] {
                out.fill(f16::ZERO);
                f32_to_f16_at(w, &s, &mut out[offset..offset + s.len()]);
                let got: Vec<u16> = out[offset..][..s.len()]
                    .iter()
                    .map(|h| h.to_bits())
                    .collect();
                let at = (offset - aligned) * 2;
                same_bits(&got, &want, |i| {
                    format!(
                        "{w}-bit copy, output {at} bytes past a 32-byte boundary, input {:?}",
                        s[i]
                    )
                });
                let outside = out[..offset].iter().chain(&out[offset + s.len()..]);
                assert!(
                    outside.into_iter().all(|h| h.to_bits() == 0),
                    "wrote outside its slice"
                );
            }
        });
    }
}
