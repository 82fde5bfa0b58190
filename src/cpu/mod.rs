//! CPU kernels over host slices: strided walking, copies and casts here; arithmetic, reductions
//! and matmul in the submodules. Work is split over rayon only when it is big enough to pay for
//! waking the pool (on 2 cores a wake-up costs about as much as 30k element-ops).

pub mod elementwise;
pub mod fork;
pub mod half_cast;
pub mod matmul;
pub mod random;
pub mod reduce;

use half::{bf16, f16};
use rayon::prelude::*;

use crate::layout::{Layout, coalesce};
use crate::{DType, Element};

/// Below this many elements a kernel runs on the calling thread.
pub const PAR_MIN: usize = 1 << 15;
/// The number of elements one rayon task handles (strided copies).
const TASK: usize = 1 << 14;

/// Walks the rows (last coalesced dim) of N layouts that share one shape.
pub struct Strided<const N: usize> {
    outer: Vec<usize>,
    outer_strides: [Vec<usize>; N],
    pub inner: usize,
    pub inner_strides: [usize; N],
    offsets: [usize; N],
}

impl<const N: usize> Strided<N> {
    pub fn new(layouts: [&Layout; N]) -> Self {
        let (mut shape, strides) = coalesce(&layouts);
        if shape.contains(&0) {
            // Nothing to walk: no rows, of one element each (so `start / inner` stays defined).
            return Strided {
                outer: vec![0],
                outer_strides: std::array::from_fn(|_| vec![0]),
                inner: 1,
                inner_strides: [0; N],
                offsets: layouts.map(|l| l.offset),
            };
        }
        let mut strides: [Vec<usize>; N] = std::array::from_fn(|k| strides[k].clone());
        let inner = shape.pop().unwrap_or(1);
        let inner_strides = std::array::from_fn(|k| strides[k].pop().unwrap_or(0));
        Strided {
            outer: shape,
            outer_strides: strides,
            inner,
            inner_strides,
            offsets: layouts.map(|l| l.offset),
        }
    }

    pub fn rows(&self) -> usize {
        self.outer.iter().product()
    }

    /// Calls `f(row, base offsets)` for each row in `rows`, stepping the multi-index like an
    /// odometer instead of dividing per row.
    pub fn for_rows(&self, rows: std::ops::Range<usize>, mut f: impl FnMut(usize, [usize; N])) {
        if rows.is_empty() {
            return;
        }
        let rank = self.outer.len();
        let mut idx = vec![0usize; rank];
        let mut rem = rows.start;
        for d in (0..rank).rev() {
            idx[d] = rem % self.outer[d];
            rem /= self.outer[d];
        }
        let mut base: [usize; N] = std::array::from_fn(|k| {
            self.offsets[k]
                + (0..rank)
                    .map(|d| idx[d] * self.outer_strides[k][d])
                    .sum::<usize>()
        });
        for r in rows {
            f(r, base);
            for d in (0..rank).rev() {
                idx[d] += 1;
                for (k, b) in base.iter_mut().enumerate() {
                    *b += self.outer_strides[k][d];
                }
                if idx[d] < self.outer[d] {
                    break;
                }
                for (k, b) in base.iter_mut().enumerate() {
                    *b -= self.outer_strides[k][d] * self.outer[d];
                }
                idx[d] = 0;
            }
        }
    }
}

/// Runs `f(first_element_index, chunk)` over chunks of `out`, in parallel when `out` is large:
/// one chunk per thread, the caller's among them (`fork::split`). Chunks hold whole rows of
/// `row` elements.
pub fn chunked<O: Send>(out: &mut [O], row: usize, f: impl Fn(usize, &mut [O]) + Sync) {
    let row = row.max(1);
    if out.len() < PAR_MIN {
        f(0, out);
        return;
    }
    let rows = out.len().div_ceil(row);
    let parts = rayon::current_num_threads().min(rows);
    let per = rows.div_ceil(parts) * row;
    let (len, ptr) = (out.len(), SendPtr(out.as_mut_ptr()));
    fork::split(parts, &|part| {
        let start = (part * per).min(len);
        let end = (start + per).min(len);
        let p = ptr;
        // SAFETY: the parts' ranges are disjoint and inside `out`, which outlives the split.
        let chunk = unsafe { std::slice::from_raw_parts_mut(p.0.add(start), end - start) };
        f(start, chunk);
    });
}

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
        $crate::cpu::vectorized! {
            $(#[$m])* $vis fn $name / $at<$T: $bound, const _FMA: bool>($($arg: $ty),*) -> $ret $body
        }
    };
    ($(#[$m:meta])* $vis:vis fn $name:ident / $at:ident <$T:ident: $bound:path, const $F:ident: bool>($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        $(#[$m])*
        $vis fn $name<$T: $bound>($($arg: $ty),*) -> $ret {
            $at($crate::cpu::vector_width(), $($arg),*)
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
                match $crate::cpu::checked_width(width) {
                    // SAFETY: the CPU supports the features each copy is compiled for.
                    512 => return unsafe { v512($($arg),*) },
                    256 => return unsafe { v256($($arg),*) },
                    _ => {}
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            $crate::cpu::checked_width(width);
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

/// `o[i] = f(a[i], b[i])` over equal-length slices, vectorised where the CPU allows.
#[inline]
fn zip_map<A: Copy, B: Copy, O>(a: &[A], b: &[B], o: &mut [O], f: &impl Fn(A, B) -> O) {
    zip_map_at(vector_width(), a, b, o, f)
}

/// `zip_map` in the copy for `width`-bit vectors.
#[inline]
pub(crate) fn zip_map_at<A: Copy, B: Copy, O>(
    width: u32,
    a: &[A],
    b: &[B],
    o: &mut [O],
    f: &impl Fn(A, B) -> O,
) {
    wide_at(width, || {
        for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
            *o = f(x, y);
        }
    })
}

/// `out[i] = f(a[i])` over `a` seen through layout `la` (same shape as `out`).
pub fn map1<A: Copy + Sync, O: Send>(
    a: &[A],
    la: &Layout,
    out: &mut [O],
    f: impl Fn(A) -> O + Sync,
) {
    if out.is_empty() {
        return;
    }
    if la.is_contiguous() {
        let a = &a[la.offset..la.offset + out.len()];
        chunked(out, 1, |start, o| {
            let n = o.len();
            zip_map(&a[start..start + n], &a[start..start + n], o, &|x, _| f(x));
        });
        return;
    }
    if map1_transposed(a, la, out, &f) {
        return;
    }
    let s = Strided::new([la]);
    let (inner, [sa]) = (s.inner, s.inner_strides);
    chunked(out, inner, |start, o| {
        let r0 = start / inner;
        s.for_rows(r0..r0 + o.len() / inner, |r, [oa]| {
            let row = &mut o[(r - r0) * inner..][..inner];
            if sa == 1 {
                zip_map(&a[oa..oa + inner], &a[oa..oa + inner], row, &|x, _| f(x));
            } else {
                for (i, o) in row.iter_mut().enumerate() {
                    *o = f(a[oa + i * sa]);
                }
            }
        });
    });
}

/// `map1` for views whose last two (coalesced) dims are transposed — stride 1 on the rows,
/// not the columns. Walking rows would touch a new cache line per element; 32×32 tiles reuse
/// each line across 32 rows, and full tiles move in 8×8 blocks. Returns false when the layout
/// is not of that shape.
fn map1_transposed<A: Copy + Sync, O: Send>(
    a: &[A],
    la: &Layout,
    out: &mut [O],
    f: &(impl Fn(A) -> O + Sync),
) -> bool {
    const TILE: usize = 32;
    let (shape, strides) = coalesce(&[la]);
    let st = &strides[0];
    let n = shape.len();
    if n < 2 || st[n - 1] == 1 || st[n - 2] != 1 {
        return false;
    }
    let (rows, cols, col_stride) = (shape[n - 2], shape[n - 1], st[n - 1]);
    let batch = Layout {
        shape: shape[..n - 2].to_vec(),
        strides: st[..n - 2].to_vec(),
        offset: la.offset,
    };
    chunked(out, cols * TILE.min(rows), |start, o| {
        let (g0, nrows) = (start / cols, o.len() / cols);
        let mut g = g0;
        while g < g0 + nrows {
            let (b, r) = (g / rows, g % rows);
            let len = TILE.min(rows - r).min(g0 + nrows - g);
            let base = batch.offset_of(b) + r;
            for c0 in (0..cols).step_by(TILE) {
                let c1 = (c0 + TILE).min(cols);
                let mut c = c0;
                // 8×8 blocks through a local array: eight contiguous reads of eight values (one
                // per source row), then eight contiguous writes, instead of 64 strided gathers.
                if len == TILE {
                    while c + 8 <= c1 {
                        for r8 in (0..TILE).step_by(8) {
                            let mut vals: [[A; 8]; 8] = [[a[base]; 8]; 8];
                            for (j, v) in vals.iter_mut().enumerate() {
                                let src = &a[base + r8 + (c + j) * col_stride..][..8];
                                v.copy_from_slice(src);
                            }
                            for i in 0..8 {
                                let orow = &mut o[(g - g0 + r8 + i) * cols + c..][..8];
                                for (j, out) in orow.iter_mut().enumerate() {
                                    *out = f(vals[j][i]);
                                }
                            }
                        }
                        c += 8;
                    }
                }
                for rr in 0..len {
                    let orow = &mut o[(g - g0 + rr) * cols..][..cols];
                    for (cc, o) in orow.iter_mut().enumerate().take(c1).skip(c) {
                        *o = f(a[base + rr + cc * col_stride]);
                    }
                }
            }
            g += len;
        }
    });
    true
}

/// `out[i] = f(a[i], b[i])` with `la`, `lb` already broadcast to the shape of `out`.
pub fn map2<A: Copy + Sync, B: Copy + Sync, O: Send>(
    a: &[A],
    la: &Layout,
    b: &[B],
    lb: &Layout,
    out: &mut [O],
    f: impl Fn(A, B) -> O + Sync,
) {
    if out.is_empty() {
        return;
    }
    if la.is_contiguous() && lb.is_contiguous() && la.numel() == out.len() {
        let a = &a[la.offset..la.offset + out.len()];
        let b = &b[lb.offset..lb.offset + out.len()];
        chunked(out, 1, |start, o| {
            let n = o.len();
            zip_map(&a[start..start + n], &b[start..start + n], o, &f);
        });
        return;
    }
    let s = Strided::new([la, lb]);
    let (inner, [sa, sb]) = (s.inner, s.inner_strides);
    chunked(out, inner, |start, o| {
        let r0 = start / inner;
        s.for_rows(r0..r0 + o.len() / inner, |r, [oa, ob]| {
            let row = &mut o[(r - r0) * inner..][..inner];
            // The common broadcasts get loops the compiler vectorises: both rows contiguous
            // (bias add), or one side a single repeated value (a scalar, a column).
            match (sa, sb) {
                (1, 1) => zip_map(&a[oa..oa + inner], &b[ob..ob + inner], row, &f),
                (1, 0) => {
                    let y = b[ob];
                    zip_map(&a[oa..oa + inner], &a[oa..oa + inner], row, &|x, _| f(x, y))
                }
                (0, 1) => {
                    let x = a[oa];
                    zip_map(&b[ob..ob + inner], &b[ob..ob + inner], row, &|y, _| f(x, y))
                }
                _ => {
                    for (i, o) in row.iter_mut().enumerate() {
                        *o = f(a[oa + i * sa], b[ob + i * sb]);
                    }
                }
            }
        });
    });
}

/// `out[i] = f(a[i], b[i], c[i])` with all layouts broadcast to the shape of `out`.
pub fn map3<A: Copy + Sync, B: Copy + Sync, C: Copy + Sync, O: Send>(
    (a, la): (&[A], &Layout),
    (b, lb): (&[B], &Layout),
    (c, lc): (&[C], &Layout),
    out: &mut [O],
    f: impl Fn(A, B, C) -> O + Sync,
) {
    if out.is_empty() {
        return;
    }
    let s = Strided::new([la, lb, lc]);
    let (inner, [sa, sb, sc]) = (s.inner, s.inner_strides);
    chunked(out, inner, |start, o| {
        let r0 = start / inner;
        s.for_rows(r0..r0 + o.len() / inner, |r, [oa, ob, oc]| {
            let row = &mut o[(r - r0) * inner..][..inner];
            for (i, o) in row.iter_mut().enumerate() {
                *o = f(a[oa + i * sa], b[ob + i * sb], c[oc + i * sc]);
            }
        });
    });
}

/// A raw pointer that may cross threads; each task writes disjoint elements through it.
struct SendPtr<T>(*mut T);
// Not derived: a derive would ask `T: Copy`, and the pointer is copyable whatever it points to.
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

/// Copies `src` (layout `ls`) into the elements of `dst` that layout `ld` names (same shape).
/// `ld` must not map two positions to one element.
pub fn copy_strided<T: Copy + Send + Sync>(src: &[T], ls: &Layout, dst: &mut [T], ld: &Layout) {
    let s = Strided::new([ld, ls]);
    let (inner, [sd, ss]) = (s.inner, s.inner_strides);
    let rows = s.rows();
    let dst_len = dst.len();
    let ptr = SendPtr(dst.as_mut_ptr());
    let body = |range: std::ops::Range<usize>| {
        let p = ptr;
        s.for_rows(range, |_, [od, os]| {
            if sd == 1 && ss == 1 {
                assert!(od + inner <= dst_len);
                // SAFETY: in bounds (checked), and rows of distinct positions are disjoint.
                unsafe {
                    std::ptr::copy_nonoverlapping(src[os..os + inner].as_ptr(), p.0.add(od), inner)
                };
                return;
            }
            for i in 0..inner {
                let d = od + i * sd;
                assert!(d < dst_len);
                // SAFETY: `d` is in bounds, and distinct positions of `ld` are distinct elements,
                // so no two tasks write the same one.
                unsafe { *p.0.add(d) = src[os + i * ss] };
            }
        })
    };
    if rows * inner < PAR_MIN {
        body(0..rows);
    } else {
        let per = (TASK / inner).max(1);
        (0..rows.div_ceil(per))
            .into_par_iter()
            .for_each(|t| body(t * per..((t + 1) * per).min(rows)));
    }
}

/// Converts `src` (layout `ls`) into contiguous `out`, element by element.
pub fn cast<S: Element, D: Element>(src: &[S], ls: &Layout, out: &mut [D]) {
    if out.is_empty() {
        return;
    }
    let contiguous = ls.is_contiguous();
    let s = &src[ls.offset.min(src.len())..];
    // Fast paths for the conversions mixed precision lives on.
    macro_rules! fast {
        ($from:ty, $to:ty, $conv:expr) => {
            if contiguous
                && S::DTYPE == <$from as Element>::DTYPE
                && D::DTYPE == <$to as Element>::DTYPE
            {
                // SAFETY: the dtypes were just checked equal, so the types are the same.
                let s: &[$from] =
                    unsafe { std::slice::from_raw_parts(s.as_ptr() as *const $from, out.len()) };
                let o: &mut [$to] = unsafe {
                    std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut $to, out.len())
                };
                chunked(o, 1, |start, o| $conv(&s[start..start + o.len()], o));
                return;
            }
        };
    }
    fast!(f32, f16, half_cast::f32_to_f16);
    fast!(f32, bf16, half_cast::f32_to_bf16);
    fast!(f16, f32, half_cast::f16_to_f32);
    fast!(bf16, f32, half_cast::bf16_to_f32);
    if D::DTYPE.is_float() || S::DTYPE.is_float() {
        map1(src, ls, out, |x| D::from_f64(x.to_f64()));
    } else {
        map1(src, ls, out, |x| D::from_i64(x.to_i64()));
    }
}

/// Fills `out` with `v`.
pub fn fill<T: Copy + Send + Sync>(out: &mut [T], v: T) {
    chunked(out, 1, |_, o| o.fill(v));
}

/// Copies `src` into `dst` (same length), in parallel for large buffers.
pub fn copy_bytes(src: &[u8], dst: &mut [u8]) {
    const CHUNK: usize = 1 << 20;
    if src.len() < 4 * CHUNK {
        dst.copy_from_slice(src);
    } else {
        dst.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .for_each(|(d, s)| d.copy_from_slice(s));
    }
}

/// The dtype of the storage a kernel of `D` reads, for debug checks.
pub fn check_dtype<T: Element>(dtype: DType) {
    debug_assert_eq!(
        T::DTYPE,
        dtype,
        "kernel type does not match the storage dtype"
    );
}
