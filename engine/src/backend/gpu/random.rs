//! Random fills made on the GPU (`kernels/random.cu`): for a seed, the values the CPU backend
//! draws (`backend::cpu::random`), so nothing is drawn on the host and uploaded.

use super::launch;
use super::ops::elementwise_grid;
use super::runtime::Gpu;
use crate::base::dtype::DType;
use crate::base::op::Op;
use crate::device::error::Result;

/// `n` uniform `[0, 1)` (or standard normal, `normal`) values of `dtype` (f32 or f64) at `out`.
pub(crate) fn fill(
    g: &Gpu,
    dtype: DType,
    out: u64,
    n: usize,
    seed: u64,
    normal: bool,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let suffix = match dtype {
        DType::F64 => "f64",
        DType::F32 => "f32",
        d => unreachable!("the tensor layer draws {d} as f32 and casts"),
    };
    let op = if normal { Op::Randn } else { Op::Rand };
    let grid = elementwise_grid(n);
    launch::random_fill(g, suffix, grid, op, n as u64, out, seed, i32::from(normal))
}

/// `n` i64s uniform in `low..high` at `out`.
pub(crate) fn fill_int(g: &Gpu, out: u64, n: usize, seed: u64, low: i64, high: i64) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let range = high.wrapping_sub(low) as u64;
    let grid = elementwise_grid(n);
    launch::randint(
        g,
        "i64",
        grid,
        Op::Randint,
        n as u64,
        out,
        seed,
        low as u64,
        range,
    )
}
