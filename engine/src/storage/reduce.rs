//! The reductions, once for every backend: sums and means over rows or columns, max/min with
//! their index, and softmax. Host storages run the `cpu` kernels; a GPU's run its kernels
//! (`gpu::reduce`) through the partial results allocated here.

use super::Storage;
use crate::backend::cpu::elementwise::Arith;
use crate::backend::cpu::{norm, reduce};
use crate::backend::gpu::reduce as gpu_reduce;
use crate::base::dtype::DType;
use crate::base::op::Op;
use crate::device::error::Result;
use crate::profile::Work;

impl Storage {
    /// Sums (or means) of `rows` contiguous rows of `len` elements; dtype f32, f64 or i64.
    pub(crate) fn sum_rows(&self, rows: usize, len: usize, mean: bool) -> Result<Storage> {
        let _op = self.profiled(if mean { Op::Mean } else { Op::Sum }, self.reduction(rows));
        // The GPU's partial sums: one per block sharing a row.
        let partial = match self.gpu() {
            Some(_) if rows > 0 && gpu_reduce::reduce_parts(rows, len) > 1 => {
                let count = rows * gpu_reduce::reduce_parts(rows, len);
                let dtype = gpu_reduce::sum_accumulator(self.dtype);
                Some(Storage::alloc(self.device(), dtype, count)?)
            }
            _ => None,
        };
        self.produce(
            self.dtype,
            rows,
            |out| match self.dtype {
                DType::F32 => reduce::sum_rows::<f32>(self.slice(), len, mean, out.slice_mut()),
                DType::F64 => reduce::sum_rows::<f64>(self.slice(), len, mean, out.slice_mut()),
                DType::I64 => reduce::sum_rows::<i64>(self.slice(), len, mean, out.slice_mut()),
                d => unreachable!("sum over {d} runs in a wider dtype"),
            },
            |g, out| {
                let partial = partial.as_ref().map_or(0, |p| p.device_ptr());
                gpu_reduce::sum_rows(
                    g,
                    self.dtype,
                    self.device_ptr(),
                    (rows, len),
                    mean,
                    partial,
                    out,
                )
            },
        )
    }

    /// Sums (or means) of each column of a contiguous `reduced × kept` storage (the sum over a
    /// tensor's leading dims); dtype f32, f64 or i64.
    pub(crate) fn sum_cols(&self, reduced: usize, kept: usize, mean: bool) -> Result<Storage> {
        let _op = self.profiled(if mean { Op::Mean } else { Op::Sum }, self.reduction(kept));
        if !self.is_host() {
            // One pass down the columns (two when they are long): no transposed copy.
            let parts = gpu_reduce::column_parts(reduced, kept);
            let partial = match parts {
                1 => None,
                _ => Some(Storage::alloc(
                    self.device(),
                    gpu_reduce::sum_accumulator(self.dtype),
                    parts * kept,
                )?),
            };
            let (input, partial_ptr) = (
                self.device_ptr(),
                partial.as_ref().map_or(0, |p| p.device_ptr()),
            );
            return self.produce(
                self.dtype,
                kept,
                |_| unreachable!("a GPU storage"),
                |g, out| {
                    gpu_reduce::sum_cols(
                        g,
                        self.dtype,
                        input,
                        (reduced, kept),
                        mean,
                        (partial_ptr, out),
                    )
                },
            );
        }
        let mut out = Storage::alloc(self.device(), self.dtype, kept)?;
        let o = &mut out;
        match self.dtype {
            DType::F32 => reduce::sum_cols::<f32>(self.slice(), reduced, kept, mean, o.slice_mut()),
            DType::F64 => reduce::sum_cols::<f64>(self.slice(), reduced, kept, mean, o.slice_mut()),
            DType::I64 => reduce::sum_cols::<i64>(self.slice(), reduced, kept, mean, o.slice_mut()),
            d => unreachable!("sum over {d} runs in a wider dtype"),
        }
        Ok(out)
    }

    /// Per-row max (or min) values and their i64 indices.
    pub(crate) fn extreme_rows(
        &self,
        rows: usize,
        len: usize,
        greater: bool,
    ) -> Result<(Storage, Storage)> {
        let _op = self.profiled(
            if greater { Op::Max } else { Op::Min },
            self.reduction(rows),
        );
        let mut values = Storage::alloc(self.device(), self.dtype, rows)?;
        let mut indices = Storage::alloc(self.device(), DType::I64, rows)?;
        if let Some(g) = self.gpu() {
            let parts = match rows {
                0 => 1,
                _ => gpu_reduce::reduce_parts(rows, len),
            };
            let partials = self.extreme_partials(rows * parts, parts > 1)?;
            gpu_reduce::extreme_rows(
                &*g?,
                self.dtype,
                self.device_ptr(),
                (rows, len, greater),
                partials.pointers(),
                (values.device_ptr(), indices.device_ptr()),
            )?;
            return Ok((values, indices));
        }
        crate::with_dtype!(self.dtype, T, {
            reduce::extreme_rows::<T>(
                self.slice(),
                len,
                greater,
                values.slice_mut(),
                indices.slice_mut(),
            )
        });
        Ok((values, indices))
    }

    /// Max (or min) down each column of a contiguous `reduced × kept` storage (`reduced ≥ 1`; the
    /// extreme over a tensor's leading dims) and the row of each, with no transposed copy.
    pub(crate) fn extreme_cols(
        &self,
        reduced: usize,
        kept: usize,
        greater: bool,
    ) -> Result<(Storage, Storage)> {
        let _op = self.profiled(
            if greater { Op::Max } else { Op::Min },
            self.reduction(kept),
        );
        let mut values = Storage::alloc(self.device(), self.dtype, kept)?;
        let mut indices = Storage::alloc(self.device(), DType::I64, kept)?;
        if let Some(g) = self.gpu() {
            let parts = gpu_reduce::column_parts(reduced, kept);
            let partials = self.extreme_partials(parts * kept, parts > 1)?;
            gpu_reduce::extreme_cols(
                &*g?,
                self.dtype,
                self.device_ptr(),
                (reduced, kept, greater),
                partials.pointers(),
                (values.device_ptr(), indices.device_ptr()),
            )?;
            return Ok((values, indices));
        }
        crate::with_dtype!(self.dtype, T, {
            reduce::extreme_cols::<T>(
                self.slice(),
                (reduced, kept),
                greater,
                values.slice_mut(),
                indices.slice_mut(),
            )
        });
        Ok((values, indices))
    }

    /// A GPU max/min's `count` partial values and indices, when its rows are split (`needed`).
    fn extreme_partials(&self, count: usize, needed: bool) -> Result<Partials> {
        Ok(match needed {
            false => Partials(None),
            true => Partials(Some((
                Storage::alloc(self.device(), self.dtype, count)?,
                Storage::alloc(self.device(), DType::I64, count)?,
            ))),
        })
    }

    pub(crate) fn softmax_rows(&self, len: usize, log: bool) -> Result<Storage> {
        let name = if log { Op::LogSoftmax } else { Op::Softmax };
        // Read twice (the max, then the sum) and written once.
        let _op = self.profiled(name, Work::reduction(self.numel, 2, self.dtype));
        let rows = self.numel.checked_div(len).unwrap_or(0);
        // A GPU splits long rows, keeping each chunk's max and sum here.
        let partials = match (self.gpu(), gpu_reduce::softmax_partials(rows, len)) {
            (Some(_), n) if n > 0 => Some(Storage::alloc(self.device(), DType::F64, n)?),
            _ => None,
        };
        self.produce(
            self.dtype,
            self.numel,
            |out| {
                let (x, o) = (self, out);
                match self.dtype {
                    DType::F32 => reduce::softmax_rows::<f32>(x.slice(), len, log, o.slice_mut()),
                    DType::F64 => reduce::softmax_rows::<f64>(x.slice(), len, log, o.slice_mut()),
                    d => unreachable!("softmax of {d} runs in f32"),
                }
            },
            |g, out| {
                let partials = partials.as_ref().map_or(0, |p| p.device_ptr());
                let (input, shape) = (self.device_ptr(), (rows, len));
                gpu_reduce::softmax_rows(g, self.dtype, input, shape, log, partials, out)
            },
        )
    }

    /// The gradient of softmax (or log-softmax) over rows of `len`, from the incoming gradient
    /// `grad` and the forward's output `out` (whole contiguous storages of one float dtype, f32 or
    /// f64): one kernel, as PyTorch's `_softmax_backward_data`.
    pub(crate) fn softmax_backward_rows(
        grad: &Storage,
        out: &Storage,
        len: usize,
        log: bool,
    ) -> Result<Storage> {
        let name = if log {
            Op::LogSoftmaxBackward
        } else {
            Op::SoftmaxBackward
        };
        let _op = grad.profiled(name, Work::reduction(grad.numel, 2, grad.dtype));
        let rows = grad.numel.checked_div(len).unwrap_or(0);
        grad.produce(
            grad.dtype,
            grad.numel,
            |gx| match grad.dtype {
                DType::F32 => reduce::softmax_backward_rows::<f32>(
                    grad.slice(),
                    out.slice(),
                    len,
                    log,
                    gx.slice_mut(),
                ),
                DType::F64 => reduce::softmax_backward_rows::<f64>(
                    grad.slice(),
                    out.slice(),
                    len,
                    log,
                    gx.slice_mut(),
                ),
                d => unreachable!("softmax's backward of {d} runs in f32"),
            },
            |g, gx| {
                let ptrs = (grad.device_ptr(), out.device_ptr());
                gpu_reduce::softmax_backward_rows(g, grad.dtype, ptrs, (rows, len), log, gx)
            },
        )
    }

    /// Layer norm over contiguous rows of `len` (f32 or f64, as `weight` and `bias`, each `len`
    /// values): the output, and each row's mean and `1/√(var + eps)` for the backward pass.
    pub(crate) fn layer_norm_rows(
        &self,
        (weight, bias): (Option<&Storage>, Option<&Storage>),
        len: usize,
        eps: f64,
    ) -> Result<[Storage; 3]> {
        // Read once (a row stays in cache across its passes), written once.
        let _op = self.profiled(Op::LayerNorm, Work::reduction(self.numel, 1, self.dtype));
        let rows = self.numel.checked_div(len).unwrap_or(0);
        let device = self.device();
        let out = Storage::alloc(device, self.dtype, self.numel)?;
        let mean = Storage::alloc(device, self.dtype, rows)?;
        let rstd = Storage::alloc(device, self.dtype, rows)?;
        if let Some(g) = self.gpu() {
            let at = |s: Option<&Storage>| s.map_or(0, Storage::device_ptr);
            let inputs = (self.device_ptr(), at(weight), at(bias));
            let outputs = (out.device_ptr(), mean.device_ptr(), rstd.device_ptr());
            gpu_reduce::layer_norm_rows(&*g?, self.dtype, inputs, (rows, len), eps, outputs)?;
            return Ok([out, mean, rstd]);
        }
        let mut outputs = [out, mean, rstd];
        match self.dtype {
            DType::F32 => host_layer_norm::<f32>(self, (weight, bias), len, eps, &mut outputs),
            DType::F64 => host_layer_norm::<f64>(self, (weight, bias), len, eps, &mut outputs),
            d => unreachable!("layer norm of {d} runs in f32"),
        }
        Ok(outputs)
    }

    /// The input's gradient of `layer_norm_rows` from the incoming gradient `grad` (contiguous,
    /// of `x`'s shape and dtype) and what it saved.
    pub(crate) fn layer_norm_backward_rows(
        [x, mean, rstd]: [&Storage; 3],
        weight: Option<&Storage>,
        grad: &Storage,
        len: usize,
    ) -> Result<Storage> {
        let _op = grad.profiled(
            Op::LayerNormBackward,
            Work::reduction(grad.numel, 2, grad.dtype),
        );
        let rows = grad.numel.checked_div(len).unwrap_or(0);
        grad.produce(
            grad.dtype,
            grad.numel,
            |gx| match grad.dtype {
                DType::F32 => {
                    host_layer_norm_backward::<f32>([x, mean, rstd], weight, grad, len, gx)
                }
                DType::F64 => {
                    host_layer_norm_backward::<f64>([x, mean, rstd], weight, grad, len, gx)
                }
                d => unreachable!("layer norm's backward of {d} runs in f32"),
            },
            |g, gx| {
                let w = weight.map_or(0, Storage::device_ptr);
                let saved = (x.device_ptr(), mean.device_ptr(), rstd.device_ptr(), w);
                let shape = (rows, len);
                gpu_reduce::layer_norm_backward_rows(
                    g,
                    grad.dtype,
                    saved,
                    grad.device_ptr(),
                    shape,
                    gx,
                )
            },
        )
    }

    /// A reduction's work: this whole storage read, `outputs` values written.
    fn reduction(&self, outputs: usize) -> Work {
        let size = self.dtype.size_in_bytes() as u64;
        Work::Reduction {
            bytes: (self.numel + outputs) as u64 * size,
            flops: self.numel as u64,
            dtype: self.dtype,
        }
    }
}

/// `Storage::layer_norm_rows` on host memory, into `[out, mean, rstd]`.
fn host_layer_norm<T: Arith>(
    x: &Storage,
    (weight, bias): (Option<&Storage>, Option<&Storage>),
    len: usize,
    eps: f64,
    [out, mean, rstd]: &mut [Storage; 3],
) {
    let affine = (
        weight.map(Storage::slice::<T>),
        bias.map(Storage::slice::<T>),
    );
    let stats = (mean.slice_mut::<T>(), rstd.slice_mut::<T>());
    norm::layer_norm_rows(x.slice::<T>(), len, eps, affine, out.slice_mut(), stats);
}

/// `Storage::layer_norm_backward_rows` on host memory, into `gx`.
fn host_layer_norm_backward<T: Arith>(
    [x, mean, rstd]: [&Storage; 3],
    weight: Option<&Storage>,
    grad: &Storage,
    len: usize,
    gx: &mut Storage,
) {
    let saved = (x.slice::<T>(), mean.slice::<T>(), rstd.slice::<T>());
    let w = weight.map(Storage::slice::<T>);
    norm::layer_norm_backward_rows(saved, w, grad.slice(), len, gx.slice_mut());
}

/// The partial values and indices a split GPU max/min combines, if it is split.
struct Partials(Option<(Storage, Storage)>);

impl Partials {
    /// Their device pointers, 0 when there are none (the kernels then never read them).
    fn pointers(&self) -> (u64, u64) {
        self.0
            .as_ref()
            .map_or((0, 0), |(v, i)| (v.device_ptr(), i.device_ptr()))
    }
}
