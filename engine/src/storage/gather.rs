//! The gathers by index entries, once for every backend: `index_select` by an index storage or
//! by positions the host holds, and the class rows of `one_hot` and `nll_loss`'s gradient. On a
//! GPU a kernel reads the entries where they are and checks them as it runs (`gpu::checks`); on
//! the host they are read and checked first.

use super::Storage;
use crate::backend::cpu;
use crate::backend::gpu::ops as gpu;
use crate::base::dtype::{DType, Element};
use crate::base::op::Op;
use crate::device::Device;
use crate::device::error::{Error, Result};
use crate::device::layout::Layout;
use crate::profile::Work;

impl Storage {
    /// nll_loss's `[n, classes]` rows of `dtype` from the class indices of this i64 storage
    /// viewed by `l`: at each class −1, or −num/den with `scale` (two 0-d views of `dtype` on
    /// this device: the backward's −g / total_weight), 0 elsewhere, in one op (`one_hot`, or
    /// `nll_loss_backward` with a scale). On a GPU, for f32 and f64, one kernel makes them
    /// from the indices where they are and checks them as it runs (`gpu::checks`); otherwise
    /// the indices are read and checked first (a GPU's wait), and the rows uploaded. A scale
    /// must be f32 or f64.
    pub(crate) fn class_rows(
        &self,
        l: &Layout,
        classes: usize,
        dtype: DType,
        scale: Option<[(&Storage, &Layout); 2]>,
        op: Op,
    ) -> Result<Storage> {
        let n = l.numel() * classes;
        let name = if scale.is_some() {
            Op::NllLossBackward
        } else {
            Op::OneHot
        };
        let _op = self.profiled(name, Work::elementwise(n, 1, dtype));
        let Some(g) = self
            .gpu()
            .filter(|_| matches!(dtype, DType::F32 | DType::F64))
        else {
            return self.class_rows_read_first(l, classes, dtype, scale, op);
        };
        let g = g?;
        let out = Storage::alloc(self.device(), dtype, n)?;
        let at = |(s, l): (&Storage, &Layout)| {
            s.device_ptr() + (l.offset * s.dtype.size_in_bytes()) as u64
        };
        let scale = scale.map(|[num, den]| (at(num), at(den)));
        let target = (self.device_ptr(), l);
        gpu::class_rows(&g, dtype, out.device_ptr(), target, classes, scale, op)?;
        Ok(out)
    }

    /// The values of the view `l` as f64, read to the host (from a GPU, a wait and a copy).
    fn to_host_values(&self, l: &Layout) -> Result<Vec<f64>> {
        if self.is_host() {
            return self.read_f64(l);
        }
        let (host, _) = self.read_back(l)?;
        host.read_f64(&Layout::contiguous(l.shape.clone()))
    }

    /// `class_rows` from indices read to the host: checked, the rows built there, in `dtype`
    /// itself (f32 values divided in f32), and moved to this storage's device.
    fn class_rows_read_first(
        &self,
        l: &Layout,
        c: usize,
        dtype: DType,
        scale: Option<[(&Storage, &Layout); 2]>,
        op: Op,
    ) -> Result<Storage> {
        let value = |(s, l): (&Storage, &Layout)| s.to_host_values(l).map(|v| v[0]);
        let at_class = match scale {
            None => -1.0,
            Some([num, den]) => {
                let (g, w) = (value(num)?, value(den)?);
                match dtype {
                    DType::F32 => f64::from(-((g as f32) / (w as f32))),
                    _ => -(g / w),
                }
            }
        };
        let classes = self.to_host_values(l)?;
        let mut rows = vec![0.0f64; classes.len() * c];
        for (i, k) in classes.into_iter().map(|k| k as i64).enumerate() {
            if k < 0 || k as usize >= c {
                return Err(Error::IndexOutOfRange {
                    op: op.name(),
                    index: k,
                    dim: 1,
                    size: c,
                });
            }
            rows[i * c + k as usize] = at_class;
        }
        let mut host = Storage::alloc(self.device().host_side(), dtype, rows.len())?;
        crate::with_dtype!(dtype, T, {
            let out = host.slice_mut::<T>();
            for (o, &v) in out.iter_mut().zip(&rows) {
                *o = T::from_f64(v);
            }
        });
        host.moved_to(self.device())
    }

    /// `index_select` along `dim` of the view `l`, at the entries of the index storage `index`
    /// (i64 or i32, of this storage's device, viewed by `li`; negative ones count from the end).
    /// On a GPU one kernel reads them where they are and checks them as it runs (a wrong one is
    /// reported at the host's next wait, `gpu::checks`); on the host they are read and checked
    /// first.
    pub(crate) fn index_select_by(
        &self,
        l: &Layout,
        dim: usize,
        (index, li): (&Storage, &Layout),
    ) -> Result<Storage> {
        let Some(g) = self.gpu() else {
            let size = l.shape[dim];
            let positions = {
                let offsets: Vec<usize> = (0..li.numel()).map(|k| li.offset_of(k)).collect();
                index_positions(index.read_f64_at(&offsets), dim, size)?
            };
            return self.index_select(l, dim, &positions);
        };
        let g = g?;
        let mut shape = l.shape.clone();
        shape[dim] = li.numel();
        let numel = crate::device::layout::numel_checked(Op::IndexSelect, &shape)?;
        let _op = self.profiled(Op::IndexSelect, Work::elementwise(numel, 1, self.dtype));
        let out = Storage::alloc(self.device(), self.dtype, numel)?;
        let entries = gpu::Entries {
            ptr: index.device_ptr(),
            layout: li,
            dtype: index.dtype,
            checked: false,
        };
        let src = (self.device_ptr(), l);
        gpu::index_select(&g, self.dtype, out.device_ptr(), src, dim, entries)?;
        Ok(out)
    }

    /// The entries `positions` (each within the dim) of dimension `dim` of the view `l`, as a
    /// new contiguous storage: one kernel on a GPU (the positions uploaded beside it, with no
    /// wait), a strided copy per entry on the host.
    pub(crate) fn index_select(
        &self,
        l: &Layout,
        dim: usize,
        positions: &[usize],
    ) -> Result<Storage> {
        let mut shape = l.shape.clone();
        shape[dim] = positions.len();
        let numel = crate::device::layout::numel_checked(Op::IndexSelect, &shape)?;
        let _op = self.profiled(Op::IndexSelect, Work::elementwise(numel, 1, self.dtype));
        let mut out = Storage::alloc(self.device(), self.dtype, numel)?;
        if let Some(g) = self.gpu() {
            let g = g?;
            let at: Vec<i64> = positions.iter().map(|&p| p as i64).collect();
            let on_host = Storage::from_slice(Device::Cpu, &at)?;
            let on_device = Storage::alloc(self.device(), DType::I64, at.len())?;
            // From pageable memory the driver has staged the bytes when this returns; the
            // kernel after it on the stream reads them. Nothing waits for either.
            crate::backend::gpu::copy::host_to_device(
                g.index,
                on_host.bytes(),
                on_device.device_ptr(),
            )?;
            let entries = gpu::Entries {
                ptr: on_device.device_ptr(),
                layout: &Layout::contiguous(vec![at.len()]),
                dtype: DType::I64,
                checked: true,
            };
            let src = (self.device_ptr(), l);
            gpu::index_select(&g, self.dtype, out.device_ptr(), src, dim, entries)?;
            return Ok(out);
        }
        // One op, priced as the one kernel a GPU runs: the entries are copied directly, not
        // through `write_view` (an op of its own each).
        crate::with_dtype!(self.dtype, T, {
            let (from, to) = (self.slice::<T>(), out.slice_mut::<T>());
            cpu::gather::index_select(from, l, dim, positions, to)
        });
        Ok(out)
    }
}

/// The `entries` of an index (negative ones counting from the end) as positions along dim `dim`
/// of size `size`, each checked.
pub(crate) fn index_positions(entries: Vec<f64>, dim: usize, size: usize) -> Result<Vec<usize>> {
    let mut positions = Vec::with_capacity(entries.len());
    for i in entries.into_iter().map(|v| v as i64) {
        let p = if i < 0 { i + size as i64 } else { i };
        if p < 0 || p >= size as i64 {
            return Err(Error::IndexOutOfRange {
                op: Op::IndexSelect.name(),
                index: i,
                dim,
                size,
            });
        }
        positions.push(p as usize);
    }
    Ok(positions)
}
