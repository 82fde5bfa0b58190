//! Every kernel the engine launches, declared once with its parameter types. Each declaration
//! gives a typed launch function (so a call site that passes the wrong count or kind of
//! argument does not compile) and an entry in `KERNELS`, which `engine/tests/kernels_nvrtc.rs` checks
//! against the parameter lists NVRTC compiles from `kernels/*.cu`, and the emulator against
//! those the C++ compiler sees at every launch: a launch whose arguments do not match its kernel
//! would read garbage on the GPU without any error. The declarations are data in
//! `kernels/declarations.rs`, which `build.rs` reads too: they are the one list of kernels.

pub use super::args::{KernelArg, Param};
use super::call::Grid;
use super::nvrtc::{self, KernelSource};
use super::runtime::Gpu;
use super::strided::Strided;
use super::tensor_list::TensorList;
use crate::device::error::Result;

/// One family of kernels: `{family}_{suffix}` in `source`, all with the same parameters.
#[derive(Debug, Clone, Copy)]
pub struct Kernel {
    pub family: &'static str,
    pub source: KernelSource,
    pub params: &'static [Param],
    pub suffixes: &'static [&'static str],
}

macro_rules! kernels {
    ($($family:ident in $source:ident for $suffixes:ident ($($arg:ident: $t:ty),* $(,)?);)*) => {
        $(
            /// Launches `{family}_{suffix}` on `g`'s stream; `op` names the user's op in errors.
            #[allow(clippy::too_many_arguments)]
            pub(crate) fn $family<O: Into<&'static str>>(
                g: &Gpu,
                suffix: &str,
                grid: Grid,
                op: O,
                $($arg: $t),*
            ) -> Result<()> {
                let name = format!(concat!(stringify!($family), "_{}"), suffix);
                g.launch(&nvrtc::$source, &name, grid, op.into(), &[$(KernelArg::arg($arg)),*])
            }
        )*

        /// Every kernel family the engine launches.
        pub const KERNELS: &[Kernel] = &[$(Kernel {
            family: stringify!($family),
            source: nvrtc::$source,
            params: &[$(<$t as KernelArg>::PARAM),*],
            suffixes: $suffixes,
        }),*];
    };
}

// The declarations: `kernels! { family in SOURCE for SUFFIXES (params); … }` and the suffix lists.
include!("../../../../kernels/declarations.rs");
