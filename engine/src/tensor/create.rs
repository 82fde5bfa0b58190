//! Constructors: filled, ranged, identity, random and from Rust data, on any device.

use std::sync::{Mutex, OnceLock};

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::{IntoOptions, Tensor};
use crate::base::dtype::{DType, Element, Scalar};
use crate::base::op::Op;
use crate::device::Device;
use crate::device::error::{Error, Result};
use crate::device::layout::{IntoShape, Layout, numel_checked};
use crate::storage::{Steps, Storage};

/// PyTorch's default CPU seed, so a fresh session draws the same numbers every time.
const DEFAULT_SEED: u64 = 67_280_421_310_721;

/// The process's generator (xoshiro256++). One stream serves every device, so the same seed
/// gives the same tensor on the CPU and on any GPU: `rand`, `randn` and `randint` take one draw
/// of it as the key of their fill, which each device computes itself from that key and each
/// value's index (Philox, `backend::cpu::random` and `kernels/random.cu`).
fn generator() -> &'static Mutex<Xoshiro256PlusPlus> {
    static RNG: OnceLock<Mutex<Xoshiro256PlusPlus>> = OnceLock::new();
    RNG.get_or_init(|| Mutex::new(Xoshiro256PlusPlus::seed_from_u64(DEFAULT_SEED)))
}

/// The seed of one random fill: the next draw of the process generator.
fn fill_seed() -> u64 {
    generator()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .random()
}

/// Reseeds the generator behind `rand`, `randn` and `randint` (`torch.manual_seed`).
pub fn manual_seed(seed: u64) {
    *generator().lock().unwrap_or_else(|e| e.into_inner()) =
        Xoshiro256PlusPlus::seed_from_u64(seed);
}

fn float_dtype(op: Op, dtype: Option<DType>) -> Result<DType> {
    match dtype.unwrap_or(DType::F32) {
        d if d.is_float() => Ok(d),
        d => Err(Error::UnsupportedDType {
            op: op.name(),
            dtype: d,
            hint: format!(
                "{op} draws floats; use `randint` for integers, or a float dtype such as DType::F32"
            ),
        }),
    }
}

impl Tensor {
    /// A tensor of `shape` filled with `value`; the dtype comes from the value (ints → i64,
    /// floats → f32, bools → bool) unless the options give one.
    pub fn full(
        shape: impl IntoShape,
        value: impl Into<Scalar>,
        opts: impl IntoOptions,
    ) -> Result<Tensor> {
        let (shape, value, o) = (shape.into_shape(), value.into(), opts.into_options());
        let dtype = o.dtype.unwrap_or(value.default_dtype());
        let n = numel_checked(Op::Full, &shape)?;
        Ok(Tensor::from_storage(
            Storage::full(o.device, dtype, n, value)?,
            shape,
        ))
    }

    /// Zeros, f32 unless the options give a dtype.
    pub fn zeros(shape: impl IntoShape, opts: impl IntoOptions) -> Result<Tensor> {
        Tensor::full(shape, 0.0, opts)
    }

    /// Ones, f32 unless the options give a dtype.
    pub fn ones(shape: impl IntoShape, opts: impl IntoOptions) -> Result<Tensor> {
        Tensor::full(shape, 1.0, opts)
    }

    /// A 0-dimensional tensor holding `value`.
    pub fn scalar(value: impl Into<Scalar>, opts: impl IntoOptions) -> Result<Tensor> {
        Tensor::full((), value, opts)
    }

    /// `start, start+1, …` below `end`: i64 for integer bounds, f32 when either is a float.
    pub fn arange(
        start: impl Into<Scalar>,
        end: impl Into<Scalar>,
        opts: impl IntoOptions,
    ) -> Result<Tensor> {
        Tensor::arange_step(start, end, 1, opts)
    }

    /// `start, start+step, …` up to (excluding) `end`.
    pub fn arange_step(
        start: impl Into<Scalar>,
        end: impl Into<Scalar>,
        step: impl Into<Scalar>,
        opts: impl IntoOptions,
    ) -> Result<Tensor> {
        let (start, end, step, o) = (start.into(), end.into(), step.into(), opts.into_options());
        let any_float = start.is_float() || end.is_float() || step.is_float();
        let dtype = o
            .dtype
            .unwrap_or(if any_float { DType::F32 } else { DType::I64 });
        let (a, b, s) = (start.to_f64(), end.to_f64(), step.to_f64());
        if s == 0.0 || !s.is_finite() || !a.is_finite() || !b.is_finite() {
            return Err(Error::invalid(
                Op::Arange,
                format!(
                    "start, end and step must be finite and step non-zero, got ({a}, {b}, {s})"
                ),
            ));
        }
        if (b - a) * s < 0.0 {
            return Err(Error::invalid(
                Op::Arange,
                format!(
                    "end {b} cannot be reached from start {a} with step {s}: the step's sign is wrong"
                ),
            ));
        }
        let count = ((b - a) / s).ceil();
        if count >= usize::MAX as f64 {
            return Err(Error::SizeOverflow {
                op: Op::Arange.name(),
                shape: vec![usize::MAX],
            });
        }
        let count = count as usize;
        if count
            .checked_mul(dtype.size_in_bytes())
            .is_none_or(|b| b > isize::MAX as usize)
        {
            return Err(Error::SizeOverflow {
                op: Op::Arange.name(),
                shape: vec![count],
            });
        }
        let steps = match (start, step) {
            (Scalar::Int(a), Scalar::Int(s)) if !any_float => Steps::Int(a, s),
            _ => Steps::Float(a, s),
        };
        let st = Storage::arange(o.device, dtype, count, steps)?;
        Ok(Tensor::from_storage(st, vec![count]))
    }

    /// The `n × n` identity matrix, made where it lives: zeros, then ones written along the
    /// diagonal (a view with stride `n + 1`), as PyTorch's CUDA `eye` does. Nothing crosses the
    /// bus to a GPU.
    pub fn eye(n: usize, opts: impl IntoOptions) -> Result<Tensor> {
        let o = opts.into_options();
        let dtype = o.dtype.unwrap_or(DType::F32);
        let n2 = numel_checked(Op::Eye, &[n, n])?;
        let mut s = Storage::full(o.device, dtype, n2, Scalar::Int(0))?;
        let ones = Storage::full(o.device, dtype, n, Scalar::Int(1))?;
        let diagonal = Layout {
            shape: vec![n],
            strides: vec![n + 1],
            offset: 0,
        };
        s.write_view(&diagonal, &ones, &Layout::contiguous(vec![n]))?;
        Ok(Tensor::from_storage(s, vec![n, n]))
    }

    /// Uniform samples in `[0, 1)`, f32 unless a float dtype is given.
    pub fn rand(shape: impl IntoShape, opts: impl IntoOptions) -> Result<Tensor> {
        let o = opts.into_options();
        let dtype = float_dtype(Op::Rand, o.dtype)?;
        Tensor::sample(shape.into_shape(), dtype, o.device, false)
    }

    /// Standard normal samples, f32 unless a float dtype is given.
    pub fn randn(shape: impl IntoShape, opts: impl IntoOptions) -> Result<Tensor> {
        let o = opts.into_options();
        let dtype = float_dtype(Op::Randn, o.dtype)?;
        Tensor::sample(shape.into_shape(), dtype, o.device, true)
    }

    fn sample(shape: Vec<usize>, dtype: DType, device: Device, normal: bool) -> Result<Tensor> {
        let n = numel_checked(if normal { Op::Randn } else { Op::Rand }, &shape)?;
        // Made where it lives, from one draw of the process generator (`Storage::random`): the
        // same values on every device. f64 is drawn in f64; every other float dtype from f32.
        let drawn = if dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let t = Tensor::from_storage(
            Storage::random(device, drawn, n, fill_seed(), normal)?,
            shape,
        );
        if t.dtype() == dtype {
            Ok(t)
        } else {
            t.to_dtype(dtype)
        }
    }

    /// Integers drawn uniformly from `low..high`, i64 unless the options give a dtype.
    pub fn randint(
        low: i64,
        high: i64,
        shape: impl IntoShape,
        opts: impl IntoOptions,
    ) -> Result<Tensor> {
        if low >= high {
            return Err(Error::invalid(
                Op::Randint,
                format!(
                    "low ({low}) must be below high ({high}); the range is low..high, high excluded"
                ),
            ));
        }
        let (shape, o) = (shape.into_shape(), opts.into_options());
        let n = numel_checked(Op::Randint, &shape)?;
        let s = Storage::randint(o.device, n, fill_seed(), low, high)?;
        let t = Tensor::from_storage(s, shape);
        match o.dtype {
            Some(d) if d != DType::I64 => t.to_dtype(d),
            _ => Ok(t),
        }
    }

    /// `0..n` in a random order, as i64 (`torch.randperm`), drawn from the generator that
    /// `manual_seed` sets: how a data loader shuffles.
    pub fn randperm(n: usize, opts: impl IntoOptions) -> Result<Tensor> {
        let o = opts.into_options();
        let mut order: Vec<i64> = (0..n as i64).collect();
        {
            let mut rng = generator().lock().unwrap_or_else(|e| e.into_inner());
            // Fisher–Yates: every order equally likely.
            for i in (1..n).rev() {
                order.swap(i, rng.random_range(0..=i));
            }
        }
        let t = Tensor::engine_values(&order, vec![n], o.device)?;
        match o.dtype {
            Some(d) if d != DType::I64 => t.to_dtype(d),
            _ => Ok(t),
        }
    }

    /// A tensor of `shape` holding `data` in row-major order (`torch.from_numpy`): the dtype is
    /// `T`'s unless the options give another, to which the values are converted.
    pub fn from_vec<T: Element>(
        data: Vec<T>,
        shape: impl IntoShape,
        opts: impl IntoOptions,
    ) -> Result<Tensor> {
        Tensor::from_slice(&data, shape, opts)
    }

    /// Like `from_vec`, copying from a slice.
    ///
    /// On a GPU the values cross the bus from the host, as with PyTorch's
    /// `torch.tensor(data, device="cuda")`: the copy is logged as a transfer from the CPU, so the
    /// card and `:transfers` show it (`Tensor::new` and `tensor!` under a GPU default come here).
    pub fn from_slice<T: Element>(
        data: &[T],
        shape: impl IntoShape,
        opts: impl IntoOptions,
    ) -> Result<Tensor> {
        let (shape, o) = (shape.into_shape(), opts.into_options());
        let n = numel_checked(Op::FromVec, &shape)?;
        if n != data.len() {
            return Err(Error::ShapeMismatch {
                op: Op::FromVec.name(),
                lhs: vec![data.len()],
                rhs: shape,
                why: format!("{} values cannot fill a tensor of {n} elements", data.len()),
            });
        }
        if o.device.is_cpu() {
            return Tensor::engine_values(data, shape, o);
        }
        o.device.check_available()?;
        let dtype = o.dtype.unwrap_or(T::DTYPE);
        Tensor::engine_values(data, shape, (dtype, Device::Cpu))?.to(&o.device)
    }

    /// Values the engine makes on the host for one of its own ops, on `opts`'s device (uploaded
    /// to a GPU unlogged: PyTorch makes these in its kernels, so a learner's transfer log lists
    /// only the copies their own code asked for). `data.len()` is the shape's element count.
    pub(crate) fn engine_values<T: Element>(
        data: &[T],
        shape: Vec<usize>,
        opts: impl IntoOptions,
    ) -> Result<Tensor> {
        let o = opts.into_options();
        let dtype = o.dtype.unwrap_or(T::DTYPE);
        if dtype == T::DTYPE {
            return Ok(Tensor::from_storage(
                Storage::from_slice(o.device, data)?,
                shape,
            ));
        }
        // Converted where the device's host data is prepared, so a real GPU receives the
        // final dtype in one upload.
        let host = o.device.host_side();
        let staged = Tensor::from_storage(Storage::from_slice(host, data)?, shape.clone());
        let converted = staged.to_dtype(dtype)?.contiguous()?;
        if host == o.device {
            return Ok(converted);
        }
        let (storage, _) = converted.storage().transfer(o.device, false)?;
        Ok(Tensor::from_storage(storage, shape))
    }

    /// Zeros with this tensor's shape, dtype and device.
    pub fn zeros_like(&self) -> Result<Tensor> {
        Tensor::zeros(self.shape(), (self.dtype(), self.device()))
    }

    /// A tensor with this one's shape, dtype and device whose values are not set (PyTorch's
    /// `empty_like`): for state the caller writes before it reads, as an optimizer's.
    pub(crate) fn uninitialized_like(&self) -> Result<Tensor> {
        let storage = Storage::alloc(self.device(), self.dtype(), self.numel())?;
        Ok(Tensor::from_storage(storage, self.shape().to_vec()))
    }

    pub fn ones_like(&self) -> Result<Tensor> {
        Tensor::ones(self.shape(), (self.dtype(), self.device()))
    }

    pub fn full_like(&self, value: impl Into<Scalar>) -> Result<Tensor> {
        Tensor::full(self.shape(), value, (self.dtype(), self.device()))
    }

    pub fn rand_like(&self) -> Result<Tensor> {
        Tensor::rand(self.shape(), (self.dtype(), self.device()))
    }

    pub fn randn_like(&self) -> Result<Tensor> {
        Tensor::randn(self.shape(), (self.dtype(), self.device()))
    }
}
