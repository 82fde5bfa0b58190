//! Every kernel the engine launches, declared once with its parameter types. Each declaration
//! gives a typed launch function (so a call site that passes the wrong count or kind of
//! argument does not compile) and an entry in `KERNELS`, which `tests/kernels_nvrtc.rs` checks
//! against the parameter lists NVRTC compiles from `kernels/*.cu`, and the emulator against
//! those the C++ compiler sees at every launch: a launch whose arguments do not match its kernel
//! would read garbage on the GPU without any error. `build.rs` reads this list too: it is the one
//! list of kernels.

pub use super::args::{KernelArg, Param};
use super::call::Grid;
use super::nvrtc::{self, KernelSource};
use super::runtime::Gpu;
use super::strided::Strided;
use super::tensor_list::TensorList;
use crate::error::Result;

/// One family of kernels: `{family}_{suffix}` in `source`, all with the same parameters.
#[derive(Debug, Clone, Copy)]
pub struct Kernel {
    pub family: &'static str,
    pub source: KernelSource,
    pub params: &'static [Param],
    pub suffixes: &'static [&'static str],
}

const ALL: &[&str] = &["f32", "f64", "f16", "bf16", "i64", "i32", "u8", "bool"];
const FLOATS: &[&str] = &["f32", "f64", "f16", "bf16"];
const HALVES: &[&str] = &["f16", "bf16"];
const SUMS: &[&str] = &["f32", "f64", "f16", "bf16", "i64"];
const WIDTHS: &[&str] = &["b1", "b2", "b4", "b8"];
const LOSSES: &[&str] = &["f32", "f64"];

macro_rules! kernels {
    ($($family:ident in $source:ident for $suffixes:ident ($($arg:ident: $t:ty),* $(,)?);)*) => {
        $(
            /// Launches `{family}_{suffix}` on `g`'s stream; `op` names the user's op in errors.
            #[allow(clippy::too_many_arguments)]
            pub(crate) fn $family(
                g: &Gpu,
                suffix: &str,
                grid: Grid,
                op: &'static str,
                $($arg: $t),*
            ) -> Result<()> {
                let name = format!(concat!(stringify!($family), "_{}"), suffix);
                g.launch(&nvrtc::$source, &name, grid, op, &[$(KernelArg::arg($arg)),*])
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

kernels! {
    binary in ELEMENTWISE for ALL (op_code: i32, n: u64, out: u64, a: u64, la: Strided, b: u64, lb: Strided);
    compare in ELEMENTWISE for ALL (op_code: i32, n: u64, out: u64, a: u64, la: Strided, b: u64, lb: Strided);
    binary_number in ELEMENTWISE for HALVES (op_code: i32, n: u64, out: u64, a: u64, la: Strided, number: f32, reverse: i32);
    compare_number in ELEMENTWISE for HALVES (op_code: i32, n: u64, out: u64, a: u64, la: Strided, number: f32);
    unary in ELEMENTWISE for ALL (op_code: i32, n: u64, out: u64, a: u64, la: Strided);
    clamp in ELEMENTWISE for ALL (n: u64, out: u64, a: u64, la: Strided, has_lo: i32, lo_bits: u64, has_hi: i32, hi_bits: u64);
    where_cond in ELEMENTWISE for ALL (n: u64, out: u64, cond: u64, lc: Strided, a: u64, la: Strided, b: u64, lb: Strided);
    cast in CAST for ALL (to_code: i32, n: u64, out: u64, a: u64, la: Strided);
    copy in CAST for WIDTHS (n: u64, dst: u64, ld: Strided, src: u64, ls: Strided);
    fill in CAST for WIDTHS (n: u64, out: u64, bits: u64);
    index_select in CAST for WIDTHS (n: u64, out: u64, src: u64, ls: Strided, dim: i32, index: u64, li: Strided, index_i32: i32, size: u64, fault: u64);
    class_rows in CAST for LOSSES (n: u64, classes: u64, out: u64, target: u64, lt: Strided, num: u64, den: u64, fault: u64);
    sum_partials in REDUCE for SUMS (chunks: u64, len: u64, parts: u64, mean: i32, input: u64, partial: u64, out: u64);
    sum_cols in REDUCE for SUMS (reduced: u64, kept: u64, parts: u64, mean: i32, input: u64, partial: u64, out: u64);
    sum_cols_finish in REDUCE for SUMS (reduced: u64, kept: u64, parts: u64, mean: i32, partial: u64, out: u64);
    sum_finish in REDUCE for SUMS (rows: u64, parts: u64, mean: i32, len: u64, partial: u64, out: u64);
    extreme_partials in REDUCE for ALL (chunks: u64, len: u64, parts: u64, greater: i32, input: u64, partial_values: u64, partial_indices: u64, values: u64, indices: u64);
    extreme_finish in REDUCE for ALL (rows: u64, parts: u64, greater: i32, partial_values: u64, partial_indices: u64, values: u64, indices: u64);
    extreme_cols in REDUCE for ALL (reduced: u64, kept: u64, parts: u64, greater: i32, input: u64, partial_values: u64, partial_indices: u64, values: u64, indices: u64);
    extreme_cols_finish in REDUCE for ALL (kept: u64, parts: u64, greater: i32, partial_values: u64, partial_indices: u64, values: u64, indices: u64);
    softmax_rows in REDUCE for FLOATS (rows: u64, len: u64, log: i32, input: u64, out: u64);
    softmax_partials in REDUCE for FLOATS (chunks: u64, len: u64, parts: u64, input: u64, maxima: u64, sums: u64);
    sgd_step in OPTIM for FLOATS (list: TensorList, lr: u64, momentum: u64, dampening: u64, weight_decay: u64, nesterov: i32);
    adam_step in OPTIM for FLOATS (list: TensorList, lr: u64, b1: u64, b2: u64, eps: u64, weight_decay: u64, decoupled: i32, c1: u64, c2: u64);
    softmax_backward_rows in REDUCE for FLOATS (rows: u64, len: u64, log: i32, grad: u64, out: u64, gx: u64);
    softmax_write in REDUCE for FLOATS (chunks: u64, len: u64, parts: u64, log: i32, input: u64, maxima: u64, sums: u64, out: u64);
}
