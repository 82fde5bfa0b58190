//! The one error type of the engine. Every variant names the operation, the argument(s) and
//! both sides of a disagreement, and its message ends with how to fix it.

use std::fmt;

use crate::base::dtype::DType;
use crate::base::units::human_bytes;
use crate::device::Device;
use crate::device::cuda_major::CUDA_MAJOR;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// Two tensors of one operation live on different devices.
    DeviceMismatch {
        op: &'static str,
        arg: String,
        arg_device: Device,
        first_arg: String,
        first_device: Device,
    },
    /// Shapes that cannot be combined (broadcast, matmul, cat, reshape…).
    ShapeMismatch {
        op: &'static str,
        lhs: Vec<usize>,
        rhs: Vec<usize>,
        why: String,
    },
    /// Two dtypes that the operation needs equal.
    DTypeMismatch {
        op: &'static str,
        lhs: DType,
        rhs: DType,
        hint: String,
    },
    /// The operation does not exist for this dtype.
    UnsupportedDType {
        op: &'static str,
        dtype: DType,
        hint: String,
    },
    /// A dimension index outside `-rank..rank`.
    DimOutOfRange {
        op: &'static str,
        dim: i64,
        rank: usize,
    },
    /// An element index outside `0..size` along a dimension.
    IndexOutOfRange {
        op: &'static str,
        index: i64,
        dim: usize,
        size: usize,
    },
    /// An argument that is wrong on its own (a negative length, an empty list…).
    InvalidArgument { op: &'static str, msg: String },
    /// A device string that does not parse.
    DeviceParse { input: String },
    /// A device that does not exist or cannot be reached.
    DeviceUnavailable { device: Device, reason: String },
    /// An allocation the device cannot hold, even after releasing its cache.
    OutOfMemory {
        device: Device,
        requested: usize,
        free: usize,
        total: usize,
        allocated: usize,
        reserved: usize,
        /// The cap this process may reserve on the device
        /// (`cuda::set_per_process_memory_fraction`), when it, not the device, stopped the
        /// allocation.
        allowed: Option<usize>,
    },
    /// The driver would not page-lock a pinned request, even after the pinned cache gave its
    /// free blocks back.
    PinnedOutOfMemory {
        requested: usize,
        /// What the cache gave back before the second try.
        released: usize,
        /// Held by pinned tensors now.
        held: usize,
        /// The host's available memory.
        available: usize,
    },
    /// A shape whose element or byte count overflows the address space.
    SizeOverflow { op: &'static str, shape: Vec<usize> },
    /// NVRTC could not compile a kernel source; `log` is NVRTC's own message.
    KernelCompile {
        kernel: String,
        arch: String,
        log: String,
    },
    /// A CUDA library placelab loads at run time is not installed; `what` says which and how to
    /// get it.
    LibraryMissing { what: String },
    /// The CUDA driver, NVRTC or cuBLAS failed a call the engine made.
    Cuda {
        op: &'static str,
        device: Device,
        msg: String,
    },
    /// A check a GPU kernel made as it ran (a class index outside the classes), read by the host
    /// at its next wait for the device, or as the REPL cell that queued the op ends (`reported`).
    FoundOnDevice {
        device: Device,
        cause: Box<Error>,
        reported: Reported,
    },
    /// The user interrupted the running cell (Ctrl-C, or a notebook's stop button).
    Interrupted,
    /// Reading a tensor's values as a Rust type of another dtype.
    ElementType {
        op: &'static str,
        tensor: DType,
        requested: DType,
    },
}

/// Where a check a GPU kernel made (`Error::FoundOnDevice`) was read, which its message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reported {
    /// At the host's next wait for the device, wherever that is (a program, as in PyTorch).
    AtNextWait,
    /// As the REPL or notebook cell that queued the op ended: the session waits for each device
    /// with checks to read, so the error is that cell's.
    AtCellEnd,
    /// At the next wait, in a later cell: the cell that queued the op ended while its device
    /// still ran it, past the session's wait, and said so.
    AfterItsCell,
}

impl Error {
    /// `op`: an `Op`, or the API call's path (`DataLoader::new`).
    pub(crate) fn invalid(op: impl Into<&'static str>, msg: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op: op.into(),
            msg: msg.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::DeviceMismatch {
                op,
                arg,
                arg_device,
                first_arg,
                first_device,
            } => device_mismatch(f, op, (arg, arg_device), (first_arg, first_device)),
            Error::ShapeMismatch { op, lhs, rhs, why } => {
                write!(f, "shape mismatch in {op}: {lhs:?} and {rhs:?}: {why}")
            }
            Error::DTypeMismatch { op, lhs, rhs, hint } => {
                write!(f, "dtype mismatch in {op}: {lhs} and {rhs}. {hint}")
            }
            Error::UnsupportedDType { op, dtype, hint } => {
                write!(f, "{op} is not supported for dtype {dtype}. {hint}")
            }
            Error::DimOutOfRange { op, dim, rank } => dim_out_of_range(f, op, *dim, *rank),
            Error::IndexOutOfRange {
                op,
                index,
                dim,
                size,
            } => write!(
                f,
                "index {index} out of range in {op}: dimension {dim} has size {size}, so indices go from 0 to {}.",
                size.saturating_sub(1)
            ),
            Error::InvalidArgument { op, msg } => write!(f, "invalid argument to {op}: {msg}"),
            Error::DeviceParse { input } => write!(
                f,
                "cannot parse {input:?} as a device. Accepted forms: \"cpu\", \"cuda\" (= cuda:0), \"cuda:N\" with N a device index, e.g. \"cuda:1\"."
            ),
            Error::DeviceUnavailable { device, reason } => write!(
                f,
                "{device} is not available: {reason}. Use `Device::cuda_if_available()` to fall back to the CPU, or `cuda::device_count()` to see how many CUDA devices there are (set PLACELAB_SIMULATE_CUDA=N for N simulated ones)."
            ),
            Error::OutOfMemory { .. } => out_of_memory_message(f, self),
            Error::PinnedOutOfMemory {
                requested,
                released,
                held,
                available,
            } => pinned_out_of_memory(f, *requested, *released, *held, *available),
            Error::SizeOverflow { op, shape } => write!(
                f,
                "shape {shape:?} in {op} has more elements or bytes than this machine can address; use a smaller shape."
            ),
            Error::KernelCompile { kernel, arch, log } => kernel_compile(f, kernel, arch, log),
            Error::LibraryMissing { what } => write!(f, "{what}"),
            Error::Cuda { op, device, msg } => write!(
                f,
                "CUDA error in {op} on {device}: {msg}. The tensors of this device may be unusable; if this repeats, restart placelab and check the GPU with `nvidia-smi`."
            ),
            Error::FoundOnDevice {
                device,
                cause,
                reported,
            } => found_on_device(f, device, cause, *reported),
            Error::Interrupted => write!(
                f,
                "interrupted by the user: the cell stopped at its next tensor operation. \
                 Variables defined before this cell are kept."
            ),
            Error::ElementType {
                op,
                tensor,
                requested,
            } => element_type(f, op, *tensor, *requested),
        }
    }
}

/// `DeviceMismatch`'s message: `(arg, its device)` against `(first_arg, its device)`.
fn device_mismatch(
    f: &mut fmt::Formatter<'_>,
    op: &str,
    (arg, arg_device): (&str, &Device),
    (first_arg, first_device): (&str, &Device),
) -> fmt::Result {
    // Suggest moving toward the GPU, the usual intent; between two GPUs, toward the first.
    let (target, stays) = if arg_device.is_cuda() && !first_device.is_cuda() {
        (arg_device, first_device)
    } else {
        (first_device, arg_device)
    };
    write!(
        f,
        "device mismatch in {op}: `{first_arg}` is on {first_device} but `{arg}` is on {arg_device}.\n\
         Tensors must share a device; move one first, e.g. `.to(&{})?` on the tensor that is on {stays}.",
        target.rust_expr()
    )
}

/// `DimOutOfRange`'s message: the range of dims, or for a 0-dimensional tensor, that it has none.
fn dim_out_of_range(f: &mut fmt::Formatter<'_>, op: &str, dim: i64, rank: usize) -> fmt::Result {
    if rank == 0 {
        write!(
            f,
            "dimension {dim} out of range in {op}: the tensor is 0-dimensional and has no dimensions to index; reshape it first, e.g. `x.reshape([1])?`."
        )
    } else {
        let r = rank as i64;
        write!(
            f,
            "dimension {dim} out of range in {op}: the tensor has {rank} dimension(s), so dims go from {} to {}.",
            -r,
            r - 1
        )
    }
}

/// `OutOfMemory`'s message: what was asked against what the device has free and what the
/// allocator holds.
fn out_of_memory(
    f: &mut fmt::Formatter<'_>,
    device: &Device,
    requested: &usize,
    free: &usize,
    total: &usize,
    allocated: &usize,
    reserved: &usize,
) -> fmt::Result {
    write!(
        f,
        "out of memory on {device}: tried to allocate {} but only {} of {} is free \
         ({} allocated by tensors, {} reserved by the cache; the cache was already released). ",
        human_bytes(*requested),
        human_bytes(*free),
        human_bytes(*total),
        human_bytes(*allocated),
        human_bytes(*reserved)
    )?;
    // After the release, what the cache still holds beyond the tensors lies in segments that
    // hold a tensor too: free pieces, none large enough for this request.
    let stranded = reserved.saturating_sub(*allocated);
    if stranded >= *requested {
        write!(
            f,
            "The cache holds {} free, enough in all, but in pieces between live tensors, none \
             large enough (fragmentation; `memory_summary` shows it as non-releasable memory): \
             freeing the tensors that share those segments gives them back whole. ",
            human_bytes(stranded)
        )?;
    }
    write!(
        f,
        "Free tensors you no longer need (`drop(x)` / `:del x`), use a smaller size or a lower-precision dtype, or move work to another device."
    )
}

/// `OutOfMemory`'s message: past this process's cap, or past what the device has free.
fn out_of_memory_message(f: &mut fmt::Formatter<'_>, e: &Error) -> fmt::Result {
    let Error::OutOfMemory {
        device,
        requested,
        free,
        total,
        allocated,
        reserved,
        allowed,
    } = e
    else {
        unreachable!("called for OutOfMemory")
    };
    match allowed {
        Some(cap) => over_the_cap(f, device, *requested, *total, (*allocated, *reserved), *cap),
        None => out_of_memory(f, device, requested, free, total, allocated, reserved),
    }
}

/// `OutOfMemory`'s message when the process's cap stopped the allocation, not the device.
fn over_the_cap(
    f: &mut fmt::Formatter<'_>,
    device: &Device,
    requested: usize,
    total: usize,
    (allocated, reserved): (usize, usize),
    cap: usize,
) -> fmt::Result {
    write!(
        f,
        "out of memory on {device}: tried to allocate {}, past this process's cap of {} \
         ({:.2} of the device's {}, set by `cuda::set_per_process_memory_fraction` or \
         PLACELAB_CUDA_MEMORY_FRACTION; {} allocated by tensors, {} reserved by the cache, \
         which was already released). The device itself may have room: the cap keeps what \
         others on it have. Free tensors you no longer need (`drop(x)` / `:del x`), use a \
         smaller size or a lower-precision dtype, or raise the cap \
         (`cuda::set_per_process_memory_fraction(f, {})`) if this GPU is yours alone.",
        human_bytes(requested),
        human_bytes(cap),
        cap as f64 / total.max(1) as f64,
        human_bytes(total),
        human_bytes(allocated),
        human_bytes(reserved),
        device.index().unwrap_or(0)
    )
}

/// `PinnedOutOfMemory`'s message.
fn pinned_out_of_memory(
    f: &mut fmt::Formatter<'_>,
    requested: usize,
    released: usize,
    held: usize,
    available: usize,
) -> fmt::Result {
    write!(
        f,
        "could not pin {} of host memory: the driver refused to page-lock it, also after \
         the pinned cache gave back {} ({} held by pinned tensors, {} of host memory \
         available). Pin less at once (smaller batches), drop pinned tensors you no longer \
         need, or leave the data pageable (no `pin_memory()`).",
        human_bytes(requested),
        human_bytes(released),
        human_bytes(held),
        human_bytes(available)
    )
}

/// `KernelCompile`'s message: NVRTC's log, then where the sources are and what else may be wrong.
fn kernel_compile(f: &mut fmt::Formatter<'_>, kernel: &str, arch: &str, log: &str) -> fmt::Result {
    write!(
        f,
        "NVRTC failed to compile the CUDA kernels of {kernel} for {arch}:\n{}\nThe kernel sources are in the `kernels/` folder of placelab; if you changed one, fix the line NVRTC names. Otherwise the installed NVRTC may be too old for this GPU: a newer CUDA {CUDA_MAJOR} NVRTC (`{}`) knows newer GPUs.",
        log.trim_end(),
        super::cuda_major::pip_install(CUDA_MAJOR)
    )
}

/// `FoundOnDevice`'s message: the op's own error, then where it was found and what it spoiled.
fn found_on_device(
    f: &mut fmt::Formatter<'_>,
    device: &Device,
    cause: &Error,
    reported: Reported,
) -> fmt::Result {
    let (when, again) = match reported {
        Reported::AtNextWait => (
            ", so it is reported here, at the next point the host waited for the device",
            "that code",
        ),
        Reported::AtCellEnd => (
            ", and this cell queued that op: it is reported as the cell ended, when the session \
             waited for the device",
            "the cell",
        ),
        Reported::AfterItsCell => (
            ". An earlier cell queued that op and ended while the device still ran it (that cell \
             said so), so it is reported here, at the next point the host waited for the device",
            "that cell",
        ),
    };
    write!(
        f,
        "{cause}\n{device} checked this as its kernel ran, without the host reading the indices \
         back{when}. The values computed from those indices are not valid: fix them and run \
         {again} again."
    )
}

/// `ElementType`'s message: how to convert the tensor, or which Rust type reads it as it is.
fn element_type(
    f: &mut fmt::Formatter<'_>,
    op: &str,
    tensor: DType,
    requested: DType,
) -> fmt::Result {
    write!(
        f,
        "{op}: the tensor holds {tensor} but {requested} was requested; convert first with `x.to_dtype(DType::{})?` or read it as {}.",
        requested.variant_name(),
        tensor.rust_type()
    )
}

impl std::error::Error for Error {}
