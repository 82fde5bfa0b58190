//! Element-wise math with NumPy/PyTorch broadcasting and type promotion, comparisons, `where`,
//! dtype casts and the operator overloads on `&Tensor`.

use std::ops;

use super::{Tensor, same_device};
use crate::base::dtype::{DType, Scalar};
use crate::base::op::{BinaryOp, CmpOp, Op, UnaryOp};
use crate::device::Device;
use crate::device::error::{Error, Result};
use crate::device::layout::broadcast_shapes;
use crate::storage::Storage;
use crate::tensor::autograd::{grads, is_grad_enabled, no_grad, record};

/// The right-hand side of a binary op: another tensor, or a number.
pub trait Operand {
    #[doc(hidden)]
    fn resolve(self) -> OperandKind;
}

#[doc(hidden)]
pub enum OperandKind {
    Tensor(Tensor),
    Scalar(Scalar),
}

impl Operand for &Tensor {
    fn resolve(self) -> OperandKind {
        OperandKind::Tensor(self.clone())
    }
}
impl Operand for Tensor {
    fn resolve(self) -> OperandKind {
        OperandKind::Tensor(self)
    }
}
macro_rules! scalar_operand {
    ($($t:ty),*) => {$(impl Operand for $t {
        fn resolve(self) -> OperandKind { OperandKind::Scalar(self.into()) }
    })*};
}
scalar_operand!(f64, f32, i64, i32, usize, bool);
impl Operand for OperandKind {
    fn resolve(self) -> OperandKind {
        self
    }
}

/// PyTorch lets a 0-d CPU tensor (a "CPU scalar", such as a loss read back or `tensor(2.0)`)
/// meet a tensor on any device, in either order. The pair with such a scalar made on the other's
/// device (see `cpu_scalar_on`); `None` when the pair needs no move.
fn cpu_scalar_moved(a: &Tensor, b: &Tensor) -> Result<Option<(Tensor, Tensor)>> {
    let cpu_scalar = |t: &Tensor| t.rank() == 0 && t.device().is_cpu();
    if a.device() == b.device() {
        Ok(None)
    } else if cpu_scalar(b) {
        Ok(Some((a.clone(), cpu_scalar_on(b, a.device())?)))
    } else if cpu_scalar(a) {
        Ok(Some((cpu_scalar_on(a, b.device())?, b.clone())))
    } else {
        Ok(None)
    }
}

/// A CPU scalar's value on `device`. PyTorch passes the value to the kernel; placelab makes it
/// there as it makes a Rust number's (a fill: nothing crosses the bus, and no host wait for an
/// upload). One that needs a gradient is moved with `.to()` instead (4 to 8 bytes, recorded),
/// so that its gradient flows back to the CPU.
fn cpu_scalar_on(scalar: &Tensor, device: Device) -> Result<Tensor> {
    if scalar.requires_grad() {
        return scalar.to(&device);
    }
    // Exact for every dtype: i64 as itself, every other value through f64.
    let value = match scalar.dtype() {
        DType::I64 => Scalar::Int(scalar.item::<i64>()?),
        DType::Bool => Scalar::Bool(scalar.item::<bool>()?),
        d if d.is_float() => Scalar::Float(scalar.item_f64()?),
        _ => Scalar::Int(scalar.item_f64()? as i64),
    };
    Tensor::scalar(value, (scalar.dtype(), device))
}

fn category(d: DType) -> u8 {
    if d.is_float() {
        2
    } else if d == DType::Bool {
        0
    } else {
        1
    }
}

/// PyTorch's `result_type` for two tensors: a 0-dim tensor only raises the dtype of a
/// dimensioned one when it is of a higher category (bool < int < float).
fn result_type(a: &Tensor, b: &Tensor) -> DType {
    let (za, zb) = (a.rank() == 0, b.rank() == 0);
    if za == zb {
        return DType::promote(a.dtype(), b.dtype());
    }
    let (dim, zero) = if za {
        (b.dtype(), a.dtype())
    } else {
        (a.dtype(), b.dtype())
    };
    if category(zero) > category(dim) {
        DType::promote(dim, zero)
    } else {
        dim
    }
}

/// The dtype a kernel on `device` computes `dtype` in. The CPU runs f16/bf16 in f32 and rounds
/// once at the end; a GPU's kernels take f16/bf16 directly (and compute in f32 inside, with the
/// same single rounding), saving the two casts' memory traffic.
fn compute_dtype(dtype: DType, device: crate::device::Device) -> DType {
    if matches!(dtype, DType::F16 | DType::BF16) && !Storage::computes_half_natively(device) {
        DType::F32
    } else {
        dtype
    }
}

/// The right-hand side of a binary op or comparison.
enum Rhs {
    /// A tensor (a Rust number made one), with the dtype of the result, the dtype both
    /// operands are first rounded to (the result's for tensors, as PyTorch casts its inputs to
    /// the common dtype; f32 for a number beside f16/bf16), and the dtype the kernel computes in.
    Tensor {
        tensor: Tensor,
        /// The Rust number `tensor` was made from, which autograd saves as a number.
        number: Option<Scalar>,
        dtype: DType,
        operands: DType,
        compute: DType,
    },
    /// A Rust number beside an f16/bf16 tensor of a real GPU: the kernel takes it as f32, and
    /// it becomes a tensor only if autograd needs one.
    HalfNumber(Scalar),
}

/// Casts `a` and `b` to `operands`, then to `compute`, broadcasts them to one shape and runs
/// `kernel` on them.
fn broadcast_pair(
    op: Op,
    a: &Tensor,
    b: &Tensor,
    (operands, compute): (DType, DType),
    kernel: impl FnOnce(
        &Storage,
        &crate::device::layout::Layout,
        &Storage,
        &crate::device::layout::Layout,
    ) -> Result<Storage>,
) -> Result<(Storage, Vec<usize>)> {
    let shape = broadcast_shapes(op, a.shape(), b.shape())?;
    let cast = |t: &Tensor| t.to_dtype(operands)?.to_dtype(compute);
    let (a, b) = (cast(a)?, cast(b)?);
    let s = kernel(
        a.storage(),
        &a.layout().broadcast_to(&shape),
        b.storage(),
        &b.layout().broadcast_to(&shape),
    )?;
    Ok((s, shape))
}

impl Tensor {
    /// This tensor converted to `dtype` (a new tensor), or this handle when it already is.
    #[must_use = "`.to_dtype()` returns a converted copy and leaves the original's dtype as it was: write `let y = x.to_dtype(DType::F16)?;`"]
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        let _op = self.profiled(Op::ToDtype);
        let s = self.storage().copy_as(self.layout(), dtype)?;
        let out = Tensor::from_storage(s, self.shape().to_vec());
        Ok(record(out, Op::ToDtype, &[self], grads::identity))
    }

    fn scalar_like(&self, s: Scalar, dtype: DType) -> Result<Tensor> {
        Tensor::scalar(s, (dtype, self.device()))
    }

    /// Turns `other` into a tensor (or keeps a number for the half-precision GPU kernels), with
    /// the dtypes of the op.
    fn rhs(&self, op: Op, other: impl Operand, true_div: bool) -> Result<Rhs> {
        match other.resolve() {
            OperandKind::Tensor(t) => {
                same_device(op, &[("self", self), ("other", &t)])?;
                let d = result_type(self, &t);
                let dtype = if true_div { d.to_float() } else { d };
                Ok(Rhs::Tensor {
                    tensor: t,
                    number: None,
                    dtype,
                    // True division converts integer operands straight to the float (PyTorch):
                    // an i64 0-d tensor is not first wrapped to an i32 operand's dtype.
                    operands: if true_div { dtype } else { d },
                    compute: compute_dtype(dtype, self.device()),
                })
            }
            OperandKind::Scalar(s) => {
                let d = DType::promote_scalar(self.dtype(), s.is_float());
                let dtype = if true_div { d.to_float() } else { d };
                // A Rust number next to an f16/bf16 tensor stays f32, as PyTorch keeps it in
                // its f32 "opmath" type on every device: `h + 0.0004884` must not round the
                // number to f16 before adding. Host devices compute half precision in f32
                // throughout; a GPU's kernels take the f16/bf16 tensor and the f32 number.
                let half = matches!(dtype, DType::F16 | DType::BF16);
                if half && self.dtype() == dtype && Storage::computes_half_natively(self.device()) {
                    return Ok(Rhs::HalfNumber(s));
                }
                let compute = if half { DType::F32 } else { dtype };
                Ok(Rhs::Tensor {
                    tensor: self.scalar_like(s, compute)?,
                    number: Some(s),
                    dtype,
                    operands: compute,
                    compute,
                })
            }
        }
    }

    fn binary(&self, op: BinaryOp, other: impl Operand, reverse: bool) -> Result<Tensor> {
        let other = other.resolve();
        if let OperandKind::Tensor(t) = &other
            && let Some((a, b)) = cpu_scalar_moved(self, t)?
        {
            return a.binary(op, b, reverse);
        }
        let _op = self.profiled(op.into());
        let (other, number, dtype, operands, compute) =
            match self.rhs(op.into(), other, op == BinaryOp::Div)? {
                Rhs::Tensor {
                    tensor,
                    number,
                    dtype,
                    operands,
                    compute,
                } => (tensor, number, dtype, operands, compute),
                Rhs::HalfNumber(number) => {
                    let s = Storage::binary_number(
                        op,
                        self.storage(),
                        self.layout(),
                        number.to_f64() as f32,
                        reverse,
                    )?;
                    let out = Tensor::from_storage(s, self.shape().to_vec());
                    if !is_grad_enabled() || !self.requires_grad() {
                        return Ok(out);
                    }
                    let other = self.scalar_like(number, DType::F32)?;
                    return Ok(self.record_binary(op, &other, Some(number), reverse, out));
                }
            };
        let (a, b) = if reverse {
            (&other, self)
        } else {
            (self, &other)
        };
        if dtype == DType::Bool && op == BinaryOp::Sub {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype,
                hint: "Subtracting bool tensors is not defined; use `a.ne(&b)?` for exclusive-or, or convert with `.to_dtype(DType::I64)?` first.".into(),
            });
        }
        if dtype == DType::Bool && op == BinaryOp::Pow {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype,
                hint: "Powers of bool tensors are not defined (as in PyTorch); convert first, e.g. `.to_dtype(DType::I64)?`.".into(),
            });
        }
        // The exponent as the result dtype holds it: -3 next to a u8 base is 253, as PyTorch.
        if op == BinaryOp::Pow
            && !dtype.is_float()
            && b.to_dtype(dtype)?.values_f64()?.iter().any(|&e| e < 0.0)
        {
            return Err(Error::invalid(
                Op::Binary(BinaryOp::Pow),
                "integers to negative integer powers are not allowed; convert the base to a float dtype first, e.g. `.to_dtype(DType::F32)?`",
            ));
        }
        let out = no_grad(|| {
            let (s, shape) =
                broadcast_pair(op.into(), a, b, (operands, compute), |x, lx, y, ly| {
                    Storage::binary(op, x, lx, y, ly)
                })?;
            Tensor::from_storage(s, shape).to_dtype(dtype)
        })?;
        Ok(self.record_binary(op, &other, number, reverse, out))
    }

    /// Records `out = self op other` (`other op self` when `reverse`) for autograd; `number` is
    /// the Rust number `other` was made from, if it was one.
    fn record_binary(
        &self,
        op: BinaryOp,
        other: &Tensor,
        number: Option<Scalar>,
        reverse: bool,
        out: Tensor,
    ) -> Tensor {
        let other_side = match number {
            Some(n) => grads::Side::Number(other, n),
            None => grads::Side::Tensor(other),
        };
        let (a, b) = if reverse {
            (other_side, grads::Side::Tensor(self))
        } else {
            (grads::Side::Tensor(self), other_side)
        };
        let (ta, tb) = if reverse {
            (other, self)
        } else {
            (self, other)
        };
        let backward = || grads::binary(op, a, b, &out);
        record(out.clone(), op.into(), &[ta, tb], backward)
    }

    /// `self + other` with broadcasting; `other` is a tensor or a number.
    pub fn add(&self, other: impl Operand) -> Result<Tensor> {
        self.binary(BinaryOp::Add, other, false)
    }

    /// ReLU's backward from this gradient and ReLU's output `out` (one kernel; not recorded).
    pub(crate) fn relu_backward(&self, out: &Tensor) -> Result<Tensor> {
        crate::tensor::autograd::no_grad(|| self.binary(BinaryOp::ReluBackward, out, false))
    }
    pub fn sub(&self, other: impl Operand) -> Result<Tensor> {
        self.binary(BinaryOp::Sub, other, false)
    }
    pub fn mul(&self, other: impl Operand) -> Result<Tensor> {
        self.binary(BinaryOp::Mul, other, false)
    }
    /// True division: integer inputs give a float result, as in PyTorch.
    pub fn div(&self, other: impl Operand) -> Result<Tensor> {
        self.binary(BinaryOp::Div, other, false)
    }
    pub fn pow(&self, exponent: impl Operand) -> Result<Tensor> {
        self.binary(BinaryOp::Pow, exponent, false)
    }
    /// Element-wise maximum (NaN wins).
    pub fn maximum(&self, other: impl Operand) -> Result<Tensor> {
        self.binary(BinaryOp::Maximum, other, false)
    }
    pub fn minimum(&self, other: impl Operand) -> Result<Tensor> {
        self.binary(BinaryOp::Minimum, other, false)
    }
    /// `other - self` (for `scalar - tensor`).
    pub fn rsub(&self, other: impl Operand) -> Result<Tensor> {
        self.binary(BinaryOp::Sub, other, true)
    }
    /// `other / self`.
    pub fn rdiv(&self, other: impl Operand) -> Result<Tensor> {
        self.binary(BinaryOp::Div, other, true)
    }
    /// `base ^ self`.
    pub fn rpow(&self, base: impl Operand) -> Result<Tensor> {
        self.binary(BinaryOp::Pow, base, true)
    }

    fn compare(&self, op: CmpOp, other: impl Operand) -> Result<Tensor> {
        let other = other.resolve();
        if let OperandKind::Tensor(t) = &other
            && let Some((a, b)) = cpu_scalar_moved(self, t)?
        {
            return a.compare(op, b);
        }
        let _op = self.profiled(op.into());
        let (other, operands, compute) = match self.rhs(op.into(), other, false)? {
            Rhs::Tensor {
                tensor,
                operands,
                compute,
                ..
            } => (tensor, operands, compute),
            Rhs::HalfNumber(number) => {
                let n = number.to_f64() as f32;
                let s = Storage::compare_number(op, self.storage(), self.layout(), n)?;
                return Ok(Tensor::from_storage(s, self.shape().to_vec()));
            }
        };
        let (s, shape) = broadcast_pair(
            op.into(),
            self,
            &other,
            (operands, compute),
            |x, lx, y, ly| Storage::compare(op, x, lx, y, ly),
        )?;
        Ok(Tensor::from_storage(s, shape))
    }

    pub fn eq(&self, other: impl Operand) -> Result<Tensor> {
        self.compare(CmpOp::Eq, other)
    }
    pub fn ne(&self, other: impl Operand) -> Result<Tensor> {
        self.compare(CmpOp::Ne, other)
    }
    pub fn lt(&self, other: impl Operand) -> Result<Tensor> {
        self.compare(CmpOp::Lt, other)
    }
    pub fn le(&self, other: impl Operand) -> Result<Tensor> {
        self.compare(CmpOp::Le, other)
    }
    pub fn gt(&self, other: impl Operand) -> Result<Tensor> {
        self.compare(CmpOp::Gt, other)
    }
    pub fn ge(&self, other: impl Operand) -> Result<Tensor> {
        self.compare(CmpOp::Ge, other)
    }

    pub(crate) fn unary_op(&self, op: UnaryOp) -> Result<Tensor> {
        let _op = self.profiled(op.into());
        let dtype = self.dtype();
        // Bools become f32 for the float ops (exp, sigmoid, …), as in PyTorch; the ops that
        // keep the dtype (neg, relu) are not defined on them.
        if dtype == DType::Bool && op.keeps_ints() && op != UnaryOp::Abs {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype,
                hint: "Convert the bool tensor first, e.g. `.to_dtype(DType::F32)?`.".into(),
            });
        }
        let out = if op.keeps_ints() {
            dtype
        } else {
            dtype.to_float()
        };
        let y = no_grad(|| {
            let x = self.to_dtype(compute_dtype(out, self.device()))?;
            let s = x.storage().unary(op, x.layout())?;
            Tensor::from_storage(s, self.shape().to_vec()).to_dtype(out)
        })?;
        Ok(record(y.clone(), op.into(), &[self], || {
            grads::unary(op, self, &y)
        }))
    }

    pub fn neg(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Neg)
    }
    pub fn abs(&self) -> Result<Tensor> {
        if self.dtype() == DType::Bool {
            return Ok(self.clone());
        }
        self.unary_op(UnaryOp::Abs)
    }
    pub fn relu(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Relu)
    }
    pub fn exp(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Exp)
    }
    /// Natural logarithm (log of 0 is -inf, of a negative number NaN).
    pub fn log(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Log)
    }
    pub fn sqrt(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Sqrt)
    }
    pub fn sigmoid(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Sigmoid)
    }
    pub fn tanh(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Tanh)
    }
    /// GELU, exact erf form (PyTorch's default).
    pub fn gelu(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Gelu)
    }

    /// Limits every element to `[min, max]`; either bound may be `None`.
    pub fn clamp(
        &self,
        min: Option<impl Into<Scalar>>,
        max: Option<impl Into<Scalar>>,
    ) -> Result<Tensor> {
        let _op = self.profiled(Op::Clamp);
        let (lo, hi) = (min.map(Into::into), max.map(Into::into));
        if lo.is_none() && hi.is_none() {
            return Err(Error::invalid(
                Op::Clamp,
                "give at least one of min and max",
            ));
        }
        let any_float = lo.is_some_and(|s| s.is_float()) || hi.is_some_and(|s| s.is_float());
        // A float bound makes a bool tensor f32 (PyTorch); integer bounds are not defined on it.
        if self.dtype() == DType::Bool && !any_float {
            return Err(Error::UnsupportedDType {
                op: Op::Clamp.name(),
                dtype: DType::Bool,
                hint: "Convert it first, e.g. `.to_dtype(DType::F32)?`.".into(),
            });
        }
        let out = DType::promote_scalar(self.dtype(), any_float);
        let y = no_grad(|| {
            let x = self.to_dtype(compute_dtype(out, self.device()))?;
            let s = x.storage().clamp(x.layout(), lo, hi)?;
            Tensor::from_storage(s, self.shape().to_vec()).to_dtype(out)
        })?;
        Ok(record(y, Op::Clamp, &[self], || grads::clamp(self, lo, hi)))
    }

    pub fn clamp_min(&self, min: impl Into<Scalar>) -> Result<Tensor> {
        self.clamp(Some(min), None::<f64>)
    }

    pub fn clamp_max(&self, max: impl Into<Scalar>) -> Result<Tensor> {
        self.clamp(None::<f64>, Some(max))
    }

    /// `x` where `condition` is true, else `y` (`torch.where`), broadcasting all three.
    pub fn where_cond(condition: &Tensor, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        let _op = x.profiled(Op::Where);
        same_device(Op::Where, &[("condition", condition), ("x", x), ("y", y)])?;
        if condition.dtype() != DType::Bool {
            return Err(Error::DTypeMismatch {
                op: Op::Where.name(),
                lhs: condition.dtype(),
                rhs: DType::Bool,
                hint: "The condition must be a bool tensor; make one with a comparison, e.g. `x.gt(0.0)?`.".into(),
            });
        }
        let shape = broadcast_shapes(
            Op::Where,
            &broadcast_shapes(Op::Where, condition.shape(), x.shape())?,
            y.shape(),
        )?;
        let dtype = result_type(x, y);
        let out = no_grad(|| {
            let (x, y) = (x.to_dtype(dtype)?, y.to_dtype(dtype)?);
            let s = Storage::where_(
                (
                    condition.storage(),
                    &condition.layout().broadcast_to(&shape),
                ),
                (x.storage(), &x.layout().broadcast_to(&shape)),
                (y.storage(), &y.layout().broadcast_to(&shape)),
            )?;
            Ok(Tensor::from_storage(s, shape))
        })?;
        let backward = || grads::where_(condition, x.shape().to_vec(), y.shape().to_vec());
        Ok(record(out, Op::Where, &[condition, x, y], backward))
    }
}

// Operators are implemented for `&Tensor` only: an impl for owned `Tensor` would make
// `x.add(1.0)` resolve to the consuming trait method and move `x` away (in a REPL, lose it).
macro_rules! binary_operator {
    ($trait:ident, $method:ident, $op:ident, $rev:ident) => {
        impl<R: Operand> ops::$trait<R> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: R) -> Result<Tensor> {
                self.$op(rhs)
            }
        }
        binary_operator!(@scalars $trait, $method, $rev, f64, f32, i64, i32);
    };
    (@scalars $trait:ident, $method:ident, $rev:ident, $($t:ty),*) => {$(
        impl ops::$trait<&Tensor> for $t {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                rhs.$rev(self)
            }
        }
    )*};
}
binary_operator!(Add, add, add, add);
binary_operator!(Sub, sub, sub, rsub);
binary_operator!(Mul, mul, mul, mul);
binary_operator!(Div, div, div, rdiv);

impl ops::Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}
