//! `DataLoader`: a dataset of two tensors (inputs and targets, one row per sample) served in
//! batches, as PyTorch's `DataLoader` over a `TensorDataset`: shuffled each epoch if asked,
//! assembled in pinned memory if asked (`pin_memory=True`), and moved to a device with the next
//! batch's copy queued while the current one is used (`non_blocking=True` with prefetching).
//! The prefetched copies go on a side stream of the device, so that on a GPU they run beside
//! the step's kernels rather than between them; a batch handed out makes the consumer's stream
//! wait for its copy, and tells the allocator that stream uses it (`record_stream`), as the
//! prefetchers written for PyTorch do.

use std::sync::OnceLock;

use crate::device::Device;
use crate::device::error::{Error, Result};
use crate::storage::stream::{Event, Stream, current_stream, with_stream};
use crate::tensor::Tensor;
use crate::tensor::autograd::no_grad;

/// Serves `(inputs, targets)` batches of `batch_size` rows, the last one smaller if the rows
/// do not divide evenly (PyTorch's `drop_last=False`).
#[derive(Clone)]
pub struct DataLoader {
    inputs: Tensor,
    targets: Tensor,
    batch_size: usize,
    shuffle: bool,
    pin_memory: bool,
    device: Option<Device>,
    /// The side stream pinned batches are copied on, made for the first.
    copies: OnceLock<Stream>,
}

impl DataLoader {
    /// A loader over `inputs` and `targets`, which must have one row per sample (equal first
    /// dimensions) on one device. Batches come in order, where the tensors live, until
    /// `shuffle`, `pin_memory` or `to_device` says otherwise.
    pub fn new(inputs: &Tensor, targets: &Tensor, batch_size: usize) -> Result<DataLoader> {
        crate::tensor::same_device(
            "DataLoader::new",
            &[("inputs", inputs), ("targets", targets)],
        )?;
        let rows = |t: &Tensor| t.shape().first().copied();
        if inputs.rank() == 0 || rows(inputs) != rows(targets) {
            return Err(Error::invalid(
                "DataLoader::new",
                format!(
                    "inputs {:?} and targets {:?} must have one row per sample: the same first dimension",
                    inputs.shape(),
                    targets.shape()
                ),
            ));
        }
        if batch_size == 0 {
            return Err(Error::invalid(
                "DataLoader::new",
                "batch_size must be at least 1",
            ));
        }
        Ok(DataLoader {
            inputs: inputs.detach(),
            targets: targets.detach(),
            batch_size,
            shuffle: false,
            pin_memory: false,
            device: None,
            copies: OnceLock::new(),
        })
    }

    /// Draws a new order of the samples at the start of every epoch (`shuffle=True`), from the
    /// generator `manual_seed` sets.
    pub fn shuffle(mut self, on: bool) -> DataLoader {
        self.shuffle = on;
        self
    }

    /// Assembles each batch in page-locked host memory (`pin_memory=True`), so that its copy to
    /// a GPU can run in the background. Only for data on the CPU.
    pub fn pin_memory(mut self, on: bool) -> Result<DataLoader> {
        if on && !self.inputs.is_cpu() {
            return Err(Error::invalid(
                "DataLoader::pin_memory",
                format!(
                    "the data is on {} already; pinning is for CPU data that is copied to a GPU batch by batch",
                    self.inputs.device()
                ),
            ));
        }
        self.pin_memory = on;
        Ok(self)
    }

    /// Delivers every batch on `device`. From pinned batches the copy is queued without waiting
    /// (`non_blocking=True`) on a side stream of the device, and the next batch is assembled and
    /// queued as soon as one is handed out, so its copy overlaps the work on the current one.
    pub fn to_device(mut self, device: &Device) -> DataLoader {
        self.device = Some(*device);
        self.copies = OnceLock::new();
        self
    }

    /// The side stream of `device` the copies go on.
    fn copy_stream(&self, device: &Device) -> Result<&Stream> {
        if let Some(s) = self.copies.get() {
            return Ok(s);
        }
        let _ = self.copies.set(Stream::new(device)?);
        Ok(self
            .copies
            .get()
            .expect("set just above, by this call or another"))
    }

    /// The number of batches in an epoch.
    pub fn len(&self) -> usize {
        self.samples().div_ceil(self.batch_size)
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.samples() == 0
    }

    /// The number of samples (rows).
    pub fn samples(&self) -> usize {
        self.inputs.shape()[0]
    }

    /// One pass over the data: an iterator of `Result<(inputs, targets)>` batches.
    pub fn epoch(&self) -> Result<Batches<'_>> {
        // The order is drawn on the host, as PyTorch's sampler does: cutting a batch from data
        // on a GPU then reads no index back from the device.
        let order = if self.shuffle {
            let order = Tensor::randperm(self.samples(), Device::Cpu)?.to_vec::<i64>()?;
            Some(order.into_iter().map(|i| i as usize).collect())
        } else {
            None
        };
        Ok(Batches {
            loader: self,
            order,
            next: 0,
            ahead: None,
        })
    }

    /// Rows `start..start + len` (in the epoch's order), pinned and moved as configured; with
    /// the event its copies end at, when they were queued on the side stream.
    fn batch(&self, order: Option<&[usize]>, start: usize) -> Result<Batch> {
        let len = self.batch_size.min(self.samples() - start);
        let (x, y) = no_grad(|| match order {
            Some(order) => {
                let rows = &order[start..start + len];
                Ok::<_, Error>((
                    self.inputs.index_select_host(0, rows.to_vec())?,
                    self.targets.index_select_host(0, rows.to_vec())?,
                ))
            }
            None => Ok((
                self.inputs.narrow(0, start, len)?,
                self.targets.narrow(0, start, len)?,
            )),
        })?;
        let (x, y) = if self.pin_memory {
            (x.pin_memory()?, y.pin_memory()?)
        } else {
            (x, y)
        };
        match &self.device {
            Some(d) if self.pin_memory => {
                let side = self.copy_stream(d)?;
                let moved = with_stream(side, || {
                    Ok::<_, Error>((x.to_non_blocking(d)?, y.to_non_blocking(d)?))
                })?;
                Ok((moved, Some(side.record_event()?)))
            }
            Some(d) => Ok(((x.to(d)?, y.to(d)?), None)),
            None => Ok(((x, y), None)),
        }
    }
}

/// A batch, and the event its copies on the side stream end at (if they went there).
type Batch = ((Tensor, Tensor), Option<Event>);

/// Hands a batch to the consumer: its stream waits for the batch's copies, and the allocator
/// learns that stream uses the tensors made on the side stream.
fn hand_out(((x, y), copied): Batch) -> Result<(Tensor, Tensor)> {
    if let Some(copied) = copied {
        let consumer = current_stream(&x.device())?;
        copied.wait(&consumer)?;
        x.record_stream(&consumer)?;
        y.record_stream(&consumer)?;
    }
    Ok((x, y))
}

/// The batches of one epoch (`DataLoader::epoch`).
pub struct Batches<'a> {
    loader: &'a DataLoader,
    order: Option<Vec<usize>>,
    next: usize,
    /// The batch assembled (and its copy queued) before it was asked for.
    ahead: Option<Batch>,
}

impl Iterator for Batches<'_> {
    type Item = Result<(Tensor, Tensor)>;

    fn next(&mut self) -> Option<Self::Item> {
        let loader = self.loader;
        let current = match self.ahead.take() {
            Some(batch) => batch,
            None if self.next < loader.samples() => {
                match loader.batch(self.order.as_deref(), self.next) {
                    Ok(batch) => batch,
                    Err(e) => return Some(Err(e)),
                }
            }
            None => return None,
        };
        self.next += loader.batch_size;
        // Prefetch: queue the next batch's copy now, so it runs while this one is used.
        if loader.pin_memory && loader.device.is_some() && self.next < loader.samples() {
            match loader.batch(self.order.as_deref(), self.next) {
                Ok(batch) => self.ahead = Some(batch),
                Err(e) => return Some(Err(e)),
            }
        }
        Some(hand_out(current))
    }
}
