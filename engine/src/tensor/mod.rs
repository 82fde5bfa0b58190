//! `Tensor`: a cheap handle (an `Arc`) over a storage, a view layout and the record of the
//! `.to()` that made it. Ops live in the submodules; the one device check is here.

pub(crate) mod autocast;
pub mod autograd;
mod create;
mod data;
mod math;
mod matmul;
mod norm;
mod reduce;
mod shape_ops;
mod to;
pub(crate) mod update;

use std::sync::Arc;

use crate::base::dtype::{DType, Element};
use crate::base::op::Op;
use crate::device::Device;
use crate::device::error::{Error, Result};
use crate::device::layout::Layout;
use crate::storage::Storage;
use crate::tensor::autograd::GradMeta;
use crate::transfer::Transfer;
use crate::transfer::inflight::InFlight;

pub use create::manual_seed;
pub use data::TensorData;

/// An n-dimensional array on a device. Cloning is cheap and shares the data, like a Python
/// reference; the memory goes back to the device's cache when the last handle is dropped.
///
/// `#[must_use]`: a tensor nobody keeps is dropped at once, and ops and `.to()` never change the
/// tensor they are called on, so a bare `x.to(&device)?;` is always a mistake (the seeds'
/// "`.to()` is not in place"). The front end makes that warning an error in cells.
#[derive(Clone)]
#[must_use = "ops and `.to()` return a new tensor and leave the original unchanged; a tensor nobody keeps is dropped at once: write `let y = x.to(&device)?;`"]
pub struct Tensor(pub(crate) Arc<TensorInner>);

pub(crate) struct TensorInner {
    pub(crate) storage: Arc<Storage>,
    pub(crate) layout: Layout,
    pub(crate) last_transfer: Option<TransferRecord>,
    pub(crate) grad_meta: GradMeta,
}

/// The `.to()` that made a tensor: finished, or a non-blocking copy that may still run.
#[derive(Clone)]
pub(crate) enum TransferRecord {
    Done(Transfer),
    InFlight(Arc<InFlight>),
}

/// Where and as what a new tensor is made: `&device`, `(DType::F16, &device)`,
/// `(&device, DType::I64)`, a bare `DType`, or `()`. Every constructor takes these. Without a
/// device the tensor lands on the default device (the CPU unless `set_default_device` chose
/// another); without a dtype, the constructor's default applies (f32 for floats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorOptions {
    pub dtype: Option<DType>,
    pub device: Device,
}

pub trait IntoOptions {
    fn into_options(self) -> TensorOptions;
}
impl IntoOptions for &Device {
    fn into_options(self) -> TensorOptions {
        TensorOptions {
            dtype: None,
            device: *self,
        }
    }
}
impl IntoOptions for Device {
    fn into_options(self) -> TensorOptions {
        TensorOptions {
            dtype: None,
            device: self,
        }
    }
}
impl IntoOptions for (DType, &Device) {
    fn into_options(self) -> TensorOptions {
        TensorOptions {
            dtype: Some(self.0),
            device: *self.1,
        }
    }
}
impl IntoOptions for (&Device, DType) {
    fn into_options(self) -> TensorOptions {
        TensorOptions {
            dtype: Some(self.1),
            device: *self.0,
        }
    }
}
impl IntoOptions for (DType, Device) {
    fn into_options(self) -> TensorOptions {
        TensorOptions {
            dtype: Some(self.0),
            device: self.1,
        }
    }
}
/// No device and no dtype: the default device and the constructor's default dtype.
impl IntoOptions for () {
    fn into_options(self) -> TensorOptions {
        TensorOptions {
            dtype: None,
            device: crate::device::default_device(),
        }
    }
}

/// This dtype, on the default device.
impl IntoOptions for DType {
    fn into_options(self) -> TensorOptions {
        TensorOptions {
            dtype: Some(self),
            device: crate::device::default_device(),
        }
    }
}

impl IntoOptions for TensorOptions {
    fn into_options(self) -> TensorOptions {
        self
    }
}

/// The one device check: every tensor of `args` must be where the first one is. Returns that
/// device, or `DeviceMismatch` naming both arguments and the fix.
pub(crate) fn same_device(op: impl Into<&'static str>, args: &[(&str, &Tensor)]) -> Result<Device> {
    let op = op.into();
    let (first_name, first) = args[0];
    expect_device(op, (first_name, first.device()), &args[1..])?;
    Ok(first.device())
}

/// The same check against a device named in the call rather than held by a tensor
/// (`DataParallel`'s first device): every tensor of `args` must be on `expected`.
pub(crate) fn expect_device(
    op: impl Into<&'static str>,
    (expected_name, expected): (&str, Device),
    args: &[(&str, &Tensor)],
) -> Result<()> {
    match args.iter().find(|(_, t)| t.device() != expected) {
        Some(&(name, t)) => Err(Error::DeviceMismatch {
            op: op.into(),
            arg: name.to_string(),
            arg_device: t.device(),
            first_arg: expected_name.to_string(),
            first_device: expected,
        }),
        None => Ok(()),
    }
}

impl Tensor {
    pub(crate) fn from_storage(storage: Storage, shape: Vec<usize>) -> Tensor {
        debug_assert_eq!(storage.numel(), shape.iter().product::<usize>());
        Tensor(Arc::new(TensorInner {
            storage: Arc::new(storage),
            layout: Layout::contiguous(shape),
            last_transfer: None,
            grad_meta: GradMeta::default(),
        }))
    }

    /// Another view of the same storage (a new tensor, with no history).
    pub(crate) fn view_as(&self, layout: Layout) -> Tensor {
        Tensor(Arc::new(TensorInner {
            storage: self.0.storage.clone(),
            layout,
            last_transfer: None,
            grad_meta: GradMeta::default(),
        }))
    }

    /// This tensor's parts, reusing the allocation when this is the only handle.
    fn into_parts(self) -> TensorInner {
        Arc::try_unwrap(self.0).unwrap_or_else(|a| TensorInner {
            storage: a.storage.clone(),
            layout: a.layout.clone(),
            last_transfer: a.last_transfer.clone(),
            grad_meta: GradMeta::default(),
        })
    }

    pub(crate) fn with_transfer(self, t: Transfer) -> Tensor {
        Tensor(Arc::new(TensorInner {
            last_transfer: Some(TransferRecord::Done(t)),
            ..self.into_parts()
        }))
    }

    /// This tensor as the destination of the non-blocking copy `f`.
    pub(crate) fn in_flight(self, f: Arc<InFlight>) -> Tensor {
        Tensor(Arc::new(TensorInner {
            last_transfer: Some(TransferRecord::InFlight(f)),
            ..self.into_parts()
        }))
    }

    pub(crate) fn with_grad_meta(self, grad_meta: GradMeta) -> Tensor {
        Tensor(Arc::new(TensorInner {
            grad_meta,
            ..self.into_parts()
        }))
    }

    pub(crate) fn storage(&self) -> &Storage {
        &self.0.storage
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.0.layout
    }

    /// Times this tensor op while a profile records: its checks, kernels and autograd record
    /// together, as PyTorch's profiler times an aten op (`storage::profiled`).
    pub(crate) fn profiled(&self, op: Op) -> Option<crate::profile::OpScope> {
        crate::storage::profiled(self.device(), op, crate::profile::Work::Unpriced)
    }

    pub fn device(&self) -> Device {
        self.0.storage.device()
    }

    pub fn shape(&self) -> &[usize] {
        &self.0.layout.shape
    }

    /// The number of dimensions (`x.dim()` in PyTorch).
    pub fn rank(&self) -> usize {
        self.0.layout.rank()
    }

    /// The size of dimension `dim` (negative counts from the end).
    pub fn size(&self, dim: impl crate::device::layout::Dim) -> Result<usize> {
        let d = crate::device::layout::resolve_dim("size", dim.as_i64(), self.rank())?;
        Ok(self.shape().get(d).copied().unwrap_or(1))
    }

    pub fn dtype(&self) -> DType {
        self.0.storage.dtype()
    }

    pub fn numel(&self) -> usize {
        self.0.layout.numel()
    }

    pub fn element_size(&self) -> usize {
        self.dtype().size_in_bytes()
    }

    /// Bytes of the elements this tensor shows (`numel × element size`, PyTorch's `nbytes`).
    pub fn nbytes(&self) -> usize {
        self.numel() * self.element_size()
    }

    /// Bytes of the allocator block behind this tensor's storage (rounded up, shared by views).
    pub fn storage_bytes(&self) -> usize {
        self.0.storage.block_bytes()
    }

    /// The ledger id of the storage, shared by every view of it.
    pub fn storage_id(&self) -> u64 {
        self.0.storage.id()
    }

    pub fn strides(&self) -> &[usize] {
        &self.0.layout.strides
    }

    pub fn storage_offset(&self) -> usize {
        self.0.layout.offset
    }

    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }

    pub fn is_cuda(&self) -> bool {
        self.device().is_cuda()
    }

    pub fn is_cpu(&self) -> bool {
        self.device().is_cpu()
    }

    /// Tells the caching allocator that `stream` uses this tensor too
    /// (`tensor.record_stream(stream)`): when the tensor is freed, its block is reused only
    /// once the work queued on `stream` by then is done. Needed for a tensor made on one stream
    /// and used on another: without it the block could be handed out again while that stream
    /// still reads it. Recording the tensor's own stream does nothing; `stream` must be of the
    /// tensor's device.
    pub fn record_stream(&self, stream: &crate::storage::stream::Stream) -> Result<()> {
        self.0.storage.record_stream(stream)
    }

    /// Whether this CPU tensor sits in page-locked memory (see `pin_memory`).
    pub fn is_pinned(&self) -> bool {
        self.0.storage.pinned
    }

    /// The `.to()` that produced this tensor: route, bytes, time, bandwidth. After a
    /// non-blocking `.to()` this waits for the copy, since its time is known only then (`None`
    /// if the copy failed; `cuda::synchronize` returns the error).
    pub fn last_transfer(&self) -> Option<&Transfer> {
        match self.0.last_transfer.as_ref()? {
            TransferRecord::Done(t) => Some(t),
            TransferRecord::InFlight(f) => f.wait().ok(),
        }
    }

    /// The non-blocking `.to()` that made this tensor, as it was queued, while its copy may
    /// still be running (`None` once it has completed, or for any other tensor). Never waits.
    pub fn transfer_in_flight(&self) -> Option<&Transfer> {
        match self.0.last_transfer.as_ref()? {
            TransferRecord::InFlight(f) if !f.check() => Some(f.queued()),
            _ => None,
        }
    }

    /// Whether two tensors share a storage (one is a view of the other).
    pub fn shares_storage_with(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0.storage, &other.0.storage)
    }

    /// This tensor, readable on the host: host-backed storages (the CPU, simulated GPUs) as they
    /// are. Not logged: the user's reads log their copy in `read_logged`.
    pub(crate) fn host_readable(&self) -> Result<Tensor> {
        Ok(self.host_copy()?.0)
    }

    /// `host_readable`, and how long a GPU's copy to the host took once its queued work was
    /// done (`None` for host-backed storages, which need no copy).
    pub(crate) fn host_copy(&self) -> Result<(Tensor, Option<std::time::Duration>)> {
        if self.storage().is_host() {
            return Ok((self.clone(), None));
        }
        let (s, took) = self.storage().read_back(self.layout())?;
        Ok((Tensor::from_storage(s, self.shape().to_vec()), Some(took)))
    }

    /// The elements in row-major order as `T`, which must be this tensor's element type. From
    /// a GPU this is a copy to the host, logged as a transfer as `.cpu()` is.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.check_element::<T>(Op::ToVec)?;
        self.read_logged(|host| host.values::<T>())
    }

    /// The rows of a 2-D tensor.
    pub fn to_vec2<T: Element>(&self) -> Result<Vec<Vec<T>>> {
        if self.rank() != 2 {
            return Err(Error::invalid(
                "to_vec2",
                format!(
                    "expected a 2-D tensor, got shape {:?}; use `to_vec` for any shape",
                    self.shape()
                ),
            ));
        }
        let cols = self.shape()[1];
        let flat = self.to_vec::<T>()?;
        Ok(if cols == 0 {
            vec![Vec::new(); self.shape()[0]]
        } else {
            flat.chunks(cols).map(|c| c.to_vec()).collect()
        })
    }

    /// Every element as f64, whatever the dtype (bools as 0/1).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        self.read_logged(Tensor::values_f64)
    }

    /// The value of a one-element tensor.
    pub fn item<T: Element>(&self) -> Result<T> {
        self.check_one_element(Op::Item)?;
        Ok(self.to_vec::<T>()?[0])
    }

    /// The value of a one-element tensor as f64, whatever its dtype.
    pub fn item_f64(&self) -> Result<f64> {
        self.check_one_element("item_f64")?;
        Ok(self.to_f64_vec()?[0])
    }

    /// The elements as `T`, read for the engine's own use (a loss's class indices, an index
    /// tensor, a scalar operand): not a user's transfer, so never logged as one.
    pub(crate) fn values<T: Element>(&self) -> Result<Vec<T>> {
        self.check_element::<T>(Op::ToVec)?;
        let host = self.host_readable()?;
        host.storage().read_vec::<T>(host.layout())
    }

    /// `values`, every element as f64.
    pub(crate) fn values_f64(&self) -> Result<Vec<f64>> {
        let host = self.host_readable()?;
        host.storage().read_f64(host.layout())
    }

    fn check_element<T: Element>(&self, op: Op) -> Result<()> {
        if T::DTYPE == self.dtype() {
            return Ok(());
        }
        Err(Error::ElementType {
            op: op.name(),
            tensor: self.dtype(),
            requested: T::DTYPE,
        })
    }

    fn check_one_element(&self, op: impl Into<&'static str>) -> Result<()> {
        if self.numel() == 1 {
            return Ok(());
        }
        Err(Error::invalid(
            op,
            format!(
                "a tensor with {} elements (shape {:?}) cannot be read as one value; reduce it first, e.g. `.sum_all()?`",
                self.numel(),
                self.shape()
            ),
        ))
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}
