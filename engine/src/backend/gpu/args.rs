//! A kernel's arguments: the parameters PTX declares (`Param`), the Rust types that fill them
//! (`KernelArg`), and one argument by value (`Arg`), as the launchers pack them and the driver
//! seam passes them on.

use super::strided::Strided;
use super::tensor_list::TensorList;

/// A kernel parameter as PTX declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// `.param .u64`: a count, a device pointer, or a scalar's bits.
    U64,
    /// `.param .u32`: an op code or a flag (`int`).
    U32,
    /// `.param .f32`: a number kept in f32.
    F32,
    /// `.param .align A .b8 [N]`: a struct passed by value.
    Struct { align: usize, bytes: usize },
}

/// The Rust type of a launch argument and its PTX parameter.
pub trait KernelArg {
    const PARAM: Param;
    fn arg(self) -> Arg;
}
impl KernelArg for u64 {
    const PARAM: Param = Param::U64;
    fn arg(self) -> Arg {
        Arg::U64(self)
    }
}
impl KernelArg for i32 {
    const PARAM: Param = Param::U32;
    fn arg(self) -> Arg {
        Arg::I32(self)
    }
}
impl KernelArg for f32 {
    const PARAM: Param = Param::F32;
    fn arg(self) -> Arg {
        Arg::F32(self)
    }
}
impl KernelArg for Strided {
    const PARAM: Param = Param::Struct {
        align: std::mem::align_of::<Strided>(),
        bytes: std::mem::size_of::<Strided>(),
    };
    fn arg(self) -> Arg {
        Arg::Strided(self)
    }
}

impl KernelArg for TensorList {
    const PARAM: Param = Param::Struct {
        align: std::mem::align_of::<TensorList>(),
        bytes: std::mem::size_of::<TensorList>(),
    };
    fn arg(self) -> Arg {
        Arg::List(Box::new(self))
    }
}

/// One kernel argument, by value.
#[derive(Debug, Clone)]
pub enum Arg {
    U64(u64),
    I32(i32),
    F32(f32),
    Strided(Strided),
    /// Boxed: a list is near a kilobyte, and the other arguments are a few words.
    List(Box<TensorList>),
}

impl Arg {
    /// The PTX parameter this argument fills.
    pub fn param(&self) -> Param {
        match self {
            Arg::U64(_) => u64::PARAM,
            Arg::I32(_) => i32::PARAM,
            Arg::F32(_) => f32::PARAM,
            Arg::Strided(_) => Strided::PARAM,
            Arg::List(_) => TensorList::PARAM,
        }
    }
}
