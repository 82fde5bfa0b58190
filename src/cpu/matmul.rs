//! Matrix products on host slices. Floats go to the `gemm` crate (AVX-512 kernels chosen at run
//! time, strided operands without copies); integers use a plain loop with i64 accumulation.

use rayon::prelude::*;

use crate::Element;

/// One operand of a batch of products: the offset of each batch's matrix, and the row and
/// column strides (in elements) shared by all of them.
pub struct Operand<'a, T> {
    pub data: &'a [T],
    pub offsets: &'a [usize],
    pub row_stride: usize,
    pub col_stride: usize,
}

/// Products smaller than this many multiply-adds run single-threaded: a rayon wake-up costs more.
const PAR_FLOPS: usize = 96 * 96 * 96;

pub trait Matmul: Element {
    /// `out[b] = a[b] · rhs[b]` for every batch `b`; `out` is contiguous `batch × m × n`.
    fn matmul(a: &Operand<Self>, b: &Operand<Self>, m: usize, n: usize, k: usize, out: &mut [Self]);
}

macro_rules! gemm_float {
    ($t:ty, $one:expr) => {
        impl Matmul for $t {
            fn matmul(
                a: &Operand<$t>,
                b: &Operand<$t>,
                m: usize,
                n: usize,
                k: usize,
                out: &mut [$t],
            ) {
                let batch = a.offsets.len();
                let big = m * n * k >= PAR_FLOPS;
                let one = |dst: &mut [$t], i: usize, par: gemm::Parallelism| {
                    if m == 0 || n == 0 {
                        return;
                    }
                    if k == 0 {
                        dst.fill(<$t as Element>::zero());
                        return;
                    }
                    // SAFETY: every index the strides reach was bounds-checked by the tensor layer
                    // (the layouts come from valid views of these slices); `dst` is m×n contiguous.
                    unsafe {
                        gemm::gemm(
                            m,
                            n,
                            k,
                            dst.as_mut_ptr(),
                            1,
                            n as isize,
                            false,
                            a.data.as_ptr().add(a.offsets[i]),
                            a.col_stride as isize,
                            a.row_stride as isize,
                            b.data.as_ptr().add(b.offsets[i]),
                            b.col_stride as isize,
                            b.row_stride as isize,
                            <$t as Element>::zero(),
                            $one,
                            false,
                            false,
                            false,
                            par,
                        )
                    }
                };
                if big || batch == 1 {
                    let par = if big {
                        gemm::Parallelism::Rayon(0)
                    } else {
                        gemm::Parallelism::None
                    };
                    for (i, dst) in out.chunks_mut((m * n).max(1)).enumerate().take(batch) {
                        one(dst, i, par);
                    }
                } else {
                    out.par_chunks_mut((m * n).max(1))
                        .enumerate()
                        .take(batch)
                        .for_each(|(i, dst)| one(dst, i, gemm::Parallelism::None));
                }
            }
        }
    };
}
gemm_float!(f32, 1.0);
gemm_float!(f64, 1.0);
gemm_float!(half::f16, half::f16::ONE);

macro_rules! int_matmul {
    ($t:ty) => {
        impl Matmul for $t {
            fn matmul(
                a: &Operand<$t>,
                b: &Operand<$t>,
                m: usize,
                n: usize,
                k: usize,
                out: &mut [$t],
            ) {
                for (bi, dst) in out
                    .chunks_mut((m * n).max(1))
                    .enumerate()
                    .take(a.offsets.len())
                {
                    let (ao, bo) = (a.offsets[bi], b.offsets[bi]);
                    for i in 0..m {
                        for j in 0..n {
                            let mut acc: i64 = 0;
                            for p in 0..k {
                                let x = a.data[ao + i * a.row_stride + p * a.col_stride] as i64;
                                let y = b.data[bo + p * b.row_stride + j * b.col_stride] as i64;
                                acc = acc.wrapping_add(x.wrapping_mul(y));
                            }
                            dst[i * n + j] = acc as $t;
                        }
                    }
                }
            }
        }
    };
}
int_matmul!(i64);
int_matmul!(i32);
int_matmul!(u8);
