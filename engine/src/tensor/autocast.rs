//! The autocast state that ops consult (`amp::autocast` turns it on): which low dtype matmuls
//! run in on this thread, and which ops stay in f32. Here, below `amp`, because the tensor ops
//! ask it.

use std::cell::Cell;

use super::Tensor;
use crate::base::dtype::DType;
use crate::base::op::Op;
use crate::device::error::{Error, Result};

thread_local! {
    static AUTOCAST: Cell<Option<DType>> = const { Cell::new(None) };
}

/// Runs `f` with autocast to `dtype` (F16 or BF16) on this thread: matmul and `Linear` take
/// f32 inputs in `dtype`; softmax, log-softmax, layer norm, sums, means and losses compute in
/// f32. Call `backward` outside it, as in PyTorch.
pub fn autocast<R>(dtype: DType, f: impl FnOnce() -> R) -> Result<R> {
    if !matches!(dtype, DType::F16 | DType::BF16) {
        return Err(Error::UnsupportedDType {
            op: Op::Autocast.name(),
            dtype,
            hint: "Autocast lowers precision to DType::F16 or DType::BF16 (bf16 is the usual choice on CPUs).".into(),
        });
    }
    struct Restore(Option<DType>);
    impl Drop for Restore {
        fn drop(&mut self) {
            AUTOCAST.with(|a| a.set(self.0));
        }
    }
    let _restore = Restore(AUTOCAST.with(|a| a.replace(Some(dtype))));
    Ok(f())
}

/// The dtype autocast lowers matmuls to on this thread, if it is on.
pub fn autocast_dtype() -> Option<DType> {
    AUTOCAST.with(|a| a.get())
}

/// `x` as autocast wants it for a matmul operand: f32 becomes the low dtype.
pub(crate) fn for_matmul(x: &Tensor) -> Result<Option<Tensor>> {
    match autocast_dtype() {
        Some(low) if x.dtype() == DType::F32 => x.to_dtype(low).map(Some),
        _ => Ok(None),
    }
}

/// `x` as autocast wants it for an op kept in full precision: f16/bf16 become f32.
pub(crate) fn for_full_precision(x: &Tensor) -> Result<Option<Tensor>> {
    match autocast_dtype() {
        Some(_) if matches!(x.dtype(), DType::F16 | DType::BF16) => {
            x.to_dtype(DType::F32).map(Some)
        }
        _ => Ok(None),
    }
}
