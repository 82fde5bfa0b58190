//! The copies of a CPU kernel compiled for each vector width (the baseline, AVX2 with FMA and
//! F16C, AVX-512), and the one this CPU runs: `wide` for a closure, `vectorized!` for a
//! function, and the `_at` forms that run a chosen copy (the tests run each one).

/// Runs `f` compiled for the widest vectors the CPU has: AVX-512 (16 floats a step), else AVX2
/// and FMA (8). The default build targets baseline x86-64 (SSE2, 4); a closure called once is
/// inlined into the wide copy, so the loops in it are vectorised for those features — 2–4×
/// faster for arithmetic-heavy maps (exp, softmax, gelu) and casts.
#[inline]
pub fn wide<R>(f: impl FnOnce() -> R) -> R {
    wide_at(vector_width(), f)
}

/// `wide` in the copy compiled for `width`-bit vectors, whatever the CPU would pick: the tests
/// run each copy on any machine (`for_each_width`). Panics if the CPU cannot run that copy.
#[inline]
pub(crate) fn wide_at<R>(width: u32, f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
        fn run512<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        #[target_feature(enable = "avx2,fma,f16c")]
        fn run256<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        match checked_width(width) {
            // SAFETY: the CPU was checked to support the features each copy is compiled for.
            512 => return unsafe { run512(f) },
            256 => return unsafe { run256(f) },
            _ => {}
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    checked_width(width);
    f()
}

/// Defines `fn $name<T: $bound>(args) -> R { body }` whose body is compiled three times — for
/// AVX-512, for AVX2+FMA and for the baseline — and run in the widest the CPU has. For kernels
/// too large to be inlined into `wide`'s vector copy through a closure. A second form,
/// `fn $name<T: $bound, const FMA: bool>`, also tells the body whether its copy has fused
/// multiply-add (`f32::mul_add` is one instruction there, and a libm call in the baseline).
/// `fn $name / $at<…>` names both: `$at(width, args)` runs the copy for `width`-bit vectors
/// (the tests run each one; it panics where the CPU cannot run that copy).
macro_rules! vectorized {
    ($(#[$m:meta])* $vis:vis fn $name:ident / $at:ident <$T:ident: $bound:path>($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        $crate::backend::cpu::simd::vectorized! {
            $(#[$m])* $vis fn $name / $at<$T: $bound, const _FMA: bool>($($arg: $ty),*) -> $ret $body
        }
    };
    ($(#[$m:meta])* $vis:vis fn $name:ident / $at:ident <$T:ident: $bound:path, const $F:ident: bool>($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        $(#[$m])*
        $vis fn $name<$T: $bound>($($arg: $ty),*) -> $ret {
            $at($crate::backend::cpu::simd::vector_width(), $($arg),*)
        }

        #[doc = concat!("`", stringify!($name), "` in the copy for `width`-bit vectors.")]
        $vis fn $at<$T: $bound>(width: u32, $($arg: $ty),*) -> $ret {
            #[inline(always)]
            fn body<$T: $bound, const $F: bool>($($arg: $ty),*) -> $ret $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
                fn v512<$T: $bound>($($arg: $ty),*) -> $ret {
                    body::<$T, true>($($arg),*)
                }
                #[target_feature(enable = "avx2,fma,f16c")]
                fn v256<$T: $bound>($($arg: $ty),*) -> $ret {
                    body::<$T, true>($($arg),*)
                }
                match $crate::backend::cpu::simd::checked_width(width) {
                    // SAFETY: the CPU supports the features each copy is compiled for.
                    512 => return unsafe { v512($($arg),*) },
                    256 => return unsafe { v256($($arg),*) },
                    _ => {}
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            $crate::backend::cpu::simd::checked_width(width);
            body::<$T, false>($($arg),*)
        }
    };
}
pub(crate) use vectorized;

/// The copies `wide` and `vectorized!` compile, by vector width: the baseline (SSE2 on x86-64),
/// AVX2 with FMA and F16C, and AVX-512.
pub(crate) const WIDTHS: [u32; 3] = [128, 256, 512];

/// The CPU features the copy for `width`-bit vectors is compiled with, beyond the baseline.
fn features(width: u32) -> &'static [&'static str] {
    match width {
        512 => &[
            "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
        ],
        256 => &["avx2", "fma", "f16c"],
        _ => &[],
    }
}

/// The features of the copy for `width`-bit vectors that this CPU lacks (empty: it can run it).
pub(crate) fn missing_features(width: u32) -> Vec<&'static str> {
    #[cfg(target_arch = "x86_64")]
    let has = |feature: &str| {
        use std::arch::is_x86_feature_detected as has;
        match feature {
            "avx2" => has!("avx2"),
            "fma" => has!("fma"),
            "f16c" => has!("f16c"),
            "avx512f" => has!("avx512f"),
            "avx512bw" => has!("avx512bw"),
            "avx512vl" => has!("avx512vl"),
            "avx512dq" => has!("avx512dq"),
            _ => false,
        }
    };
    // Elsewhere only the baseline copy is compiled.
    #[cfg(not(target_arch = "x86_64"))]
    let has = |_: &str| false;
    features(width)
        .iter()
        .copied()
        .filter(|f| !has(f))
        .collect()
}

/// The widest vectors `wide` may use here: 512, 256, or 128 (baseline). Checked once.
pub(crate) fn vector_width() -> u32 {
    static WIDTH: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *WIDTH.get_or_init(|| {
        let runs = |w: u32| missing_features(w).is_empty();
        [512, 256].into_iter().find(|&w| runs(w)).unwrap_or(128)
    })
}

/// `width`, once checked to be a compiled copy's that this CPU can run: running a copy whose
/// instructions the CPU lacks would be undefined behaviour, so anything else panics.
#[inline]
pub(crate) fn checked_width(width: u32) -> u32 {
    assert!(
        WIDTHS.contains(&width) && width <= vector_width(),
        "no {width}-bit copy runs on this CPU (it lacks {:?})",
        missing_features(width)
    );
    width
}

/// Calls `f` with the width of each compiled copy this CPU can run, and says which it skips and
/// why: a copy needing instructions the CPU lacks cannot run here at all, so its tests prove
/// nothing on this machine. Said once per process, on stderr itself rather than through
/// `eprintln!`, which the test harness would hide for a passing test.
#[cfg(test)]
pub(crate) fn for_each_width(mut f: impl FnMut(u32)) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        use std::io::Write;
        for width in WIDTHS {
            let missing = missing_features(width);
            if !missing.is_empty() {
                let why = missing.join(", ");
                let line =
                    format!("{width}-bit copy skipped by the per-copy tests: CPU lacks {why}\n");
                let _ = std::io::stderr().write_all(line.as_bytes());
            }
        }
    });
    for width in WIDTHS
        .into_iter()
        .filter(|&w| missing_features(w).is_empty())
    {
        f(width);
    }
}
