//! Random fills, made where the storage lives: the CPU backend's `random` on host memory (and on a
//! simulated GPU), `kernels/random.cu` on a GPU. Both compute each value from the seed and its
//! index alone, the same bits on every device.

use super::{Storage, profiled};
use crate::backend::cpu::random as cpu;
use crate::backend::gpu::random as gpu;
use crate::base::dtype::DType;
use crate::base::op::Op;
use crate::device::Device;
use crate::device::error::Result;
use crate::profile::{OpScope, Work};

/// Where a fill of `numel` values of `dtype` is written, and the profile's record of the op
/// `name` that makes it (a kernel writing those bytes): keep the scope while the fill runs.
fn allocate(
    device: Device,
    name: Op,
    dtype: DType,
    numel: usize,
) -> Result<(Storage, Option<OpScope>)> {
    let work = Work::Kernel {
        bytes: (numel * dtype.size_in_bytes()) as u64,
        flops: 0,
        dtype,
    };
    let op = profiled(device, name, work);
    Ok((Storage::alloc(device, dtype, numel)?, op))
}

impl Storage {
    /// `numel` uniform `[0, 1)` (or standard normal, `normal`) values of `dtype`, f32 or f64.
    pub(crate) fn random(
        device: Device,
        dtype: DType,
        numel: usize,
        seed: u64,
        normal: bool,
    ) -> Result<Storage> {
        let name = if normal { Op::Randn } else { Op::Rand };
        let (mut s, _op) = allocate(device, name, dtype, numel)?;
        match (s.gpu(), dtype) {
            (Some(g), _) => gpu::fill(&*g?, dtype, s.device_ptr(), numel, seed, normal)?,
            (None, DType::F64) => cpu::fill(s.slice_mut::<f64>(), seed, normal),
            (None, _) => cpu::fill(s.slice_mut::<f32>(), seed, normal),
        }
        Ok(s)
    }

    /// `numel` i64s uniform in `low..high` (`low < high`).
    pub(crate) fn randint(
        device: Device,
        numel: usize,
        seed: u64,
        low: i64,
        high: i64,
    ) -> Result<Storage> {
        let (mut s, _op) = allocate(device, Op::Randint, DType::I64, numel)?;
        match s.gpu() {
            Some(g) => gpu::fill_int(&*g?, s.device_ptr(), numel, seed, low, high)?,
            None => cpu::fill_int(s.slice_mut::<i64>(), seed, low, high),
        }
        Ok(s)
    }
}
