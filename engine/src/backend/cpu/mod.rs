//! CPU kernels over host slices: strided walking, copies and casts here; arithmetic, reductions
//! and matmul in the submodules, and a kernel's copies per vector width in `simd`. Work is split
//! over rayon only when it is big enough to pay for waking the pool (on 2 cores a wake-up costs
//! about as much as 30k element-ops).

pub mod elementwise;
pub mod fork;
pub mod gather;
pub mod half_cast;
pub mod matmul;
pub mod norm;
pub mod optim;
pub mod philox;
pub mod random;
pub mod reduce;
pub(crate) mod simd;

use half::{bf16, f16};
use rayon::prelude::*;

pub use simd::wide;
use simd::{vector_width, wide_at};

use crate::base::dtype::{DType, Element};
use crate::device::layout::{Layout, coalesce};

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
    map1_at(vector_width(), a, la, out, f)
}

/// `map1` with its rows in the copy compiled for `width`-bit vectors.
fn map1_at<A: Copy + Sync, O: Send>(
    width: u32,
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
            zip_map_at(
                width,
                &a[start..start + n],
                &a[start..start + n],
                o,
                &|x, _| f(x),
            );
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
                zip_map_at(
                    width,
                    &a[oa..oa + inner],
                    &a[oa..oa + inner],
                    row,
                    &|x, _| f(x),
                );
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
pub(crate) struct SendPtr<T>(pub(crate) *mut T);
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
    copy_strided_at(vector_width(), src, ls, dst, ld)
}

/// `copy_strided` with its rows in the copy compiled for `width`-bit vectors.
pub(crate) fn copy_strided_at<T: Copy + Send + Sync>(
    width: u32,
    src: &[T],
    ls: &Layout,
    dst: &mut [T],
    ld: &Layout,
) {
    if ld.is_contiguous() {
        // Into a gap-free destination (`contiguous()`, `copy()`): `map1`'s paths, vectorised
        // rows and the tiled transpose. The identity moves each value as it is, so NaN payloads
        // and signalling NaNs survive bit for bit (no conversion quiets them).
        let n = ld.numel();
        if n > 0 && ls.is_contiguous() {
            // Gap-free to gap-free (`pin_memory()`, a clone): `memcpy` in each thread's chunk,
            // whose large-copy path writes around the cache instead of reading every
            // destination line first.
            let from = &src[ls.offset..ls.offset + n];
            chunked(&mut dst[ld.offset..ld.offset + n], 1, |start, o| {
                o.copy_from_slice(&from[start..start + o.len()])
            });
            return;
        }
        if n > 0 {
            map1_at(width, src, ls, &mut dst[ld.offset..ld.offset + n], |x| x);
        }
        return;
    }
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

/// The threads the CPU kernels use.
pub fn threads() -> usize {
    rayon::current_num_threads()
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::cast;
    use super::half_cast::tests::{inputs, same_bits};
    use crate::base::dtype::Element;
    use crate::device::layout::Layout;

    /// `cpu::cast` of a strided view (element by element, through f64) against the contiguous
    /// fast path: the same bits, so that a tensor's values never depend on its layout.
    fn strided_matches<S: Element, D: Element, B: PartialEq + std::fmt::Debug>(
        s: &[S],
        bits: impl Fn(D) -> B,
    ) {
        let n = s.len();
        let doubled: Vec<S> = s.iter().flat_map(|&x| [x, x]).collect();
        let view = Layout {
            shape: vec![n],
            strides: vec![2],
            offset: 1,
        };
        let (mut strided, mut contiguous) = (vec![D::zero(); n], vec![D::zero(); n]);
        cast(&doubled, &view, &mut strided);
        cast(s, &Layout::contiguous(vec![n]), &mut contiguous);
        let strided: Vec<B> = strided.into_iter().map(&bits).collect();
        let contiguous: Vec<B> = contiguous.into_iter().map(&bits).collect();
        same_bits(&strided, &contiguous, |i| format!("input {:?}", s[i]));
    }

    /// Same-dtype copies of views into contiguous memory move bits, on every vector width this
    /// CPU has: NaN payloads, signalling NaNs and negative zero survive the vectorised rows, the
    /// tiled transpose (its 8×8 blocks and its edges) and the element-by-element walk.
    #[test]
    fn copies_of_views_keep_every_bit_on_every_width() {
        let special = [
            0x7f80_0001u32,
            0x7fc1_2345,
            0x8000_0000,
            0xffc0_0001,
            0x7fbf_ffff,
        ];
        let (rows, cols) = (70, 45);
        let bits: Vec<u32> = (0..rows * cols)
            .map(|i| {
                special
                    .get(i % 7)
                    .copied()
                    .unwrap_or((i as u32).wrapping_mul(2654435761))
            })
            .collect();
        let src: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
        let at = |l: &Layout, idx: &[usize]| {
            l.offset
                + idx
                    .iter()
                    .zip(&l.strides)
                    .map(|(i, s)| i * s)
                    .sum::<usize>()
        };
        let views = [
            // The transpose of a rows × cols matrix: cols × rows, stride 1 down its columns.
            Layout {
                shape: vec![cols, rows],
                strides: vec![1, cols],
                offset: 0,
            },
            // A contiguous run at an offset, and every other element of each row.
            Layout {
                shape: vec![rows * cols - 3],
                strides: vec![1],
                offset: 3,
            },
            Layout {
                shape: vec![rows, cols / 2],
                strides: vec![cols, 2],
                offset: 1,
            },
        ];
        super::simd::for_each_width(|width| {
            for view in &views {
                let (d0, d1) = (view.shape[0], view.shape.get(1).copied().unwrap_or(1));
                let mut out = vec![0f32; d0 * d1 + 2];
                let dst = Layout {
                    offset: 2,
                    ..Layout::contiguous(view.shape.clone())
                };
                super::copy_strided_at(width, &src, view, &mut out, &dst);
                for i in 0..d0 {
                    for j in 0..d1 {
                        let idx: Vec<usize> = if view.shape.len() == 2 {
                            vec![i, j]
                        } else {
                            vec![i]
                        };
                        let want = bits[at(view, &idx)];
                        let got = out[2 + i * d1 + j].to_bits();
                        assert_eq!(got, want, "{width}-bit copy of {view:?} at {idx:?}");
                    }
                }
            }
        });
    }

    #[test]
    fn strided_half_casts_give_the_contiguous_bits() {
        let s = inputs();
        strided_matches(&s, f16::to_bits);
        strided_matches(&s, bf16::to_bits);
        let all_f16: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        strided_matches(&all_f16, f32::to_bits);
        let all_bf16: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        strided_matches(&all_bf16, f32::to_bits);
    }
}
