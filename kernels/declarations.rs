// Every kernel the engine launches, declared once with its parameter types: `family in SOURCE
// for SUFFIXES (params);` is the kernels `{family}_{suffix}` of `kernels/{source}.cu`, one for each
// suffix, all with those parameters. Data only: each reader defines `kernels!` before it includes
// this file.
//  - `engine/src/backend/gpu/launch.rs` makes each family a typed launch function and an entry of `KERNELS`;
//  - `build.rs` compiles, beside each file, a table of the kernels declared in it for the
//    emulator: a declared kernel missing from its file fails the build, naming it.

const ALL: &[&str] = &["f32", "f64", "f16", "bf16", "i64", "i32", "u8", "bool"];
const FLOATS: &[&str] = &["f32", "f64", "f16", "bf16"];
const HALVES: &[&str] = &["f16", "bf16"];
const SUMS: &[&str] = &["f32", "f64", "f16", "bf16", "i64"];
const WIDTHS: &[&str] = &["b1", "b2", "b4", "b8"];
const LOSSES: &[&str] = &["f32", "f64"];
const DRAWN: &[&str] = &["f32", "f64"];
const INDICES: &[&str] = &["i64"];
// Layer norm runs f16/bf16 in f32 (the tensor layer casts them).
const NORMS: &[&str] = &["f32", "f64"];

kernels! {
    binary in ELEMENTWISE for ALL (op_code: i32, n: u64, out: u64, a: u64, la: Strided, b: u64, lb: Strided);
    compare in ELEMENTWISE for ALL (op_code: i32, n: u64, out: u64, a: u64, la: Strided, b: u64, lb: Strided);
    binary_number in ELEMENTWISE for HALVES (op_code: i32, n: u64, out: u64, a: u64, la: Strided, number: f32, reverse: i32);
    compare_number in ELEMENTWISE for HALVES (op_code: i32, n: u64, out: u64, a: u64, la: Strided, number: f32);
    unary in ELEMENTWISE for ALL (op_code: i32, n: u64, out: u64, a: u64, la: Strided);
    clamp in ELEMENTWISE for ALL (n: u64, out: u64, a: u64, la: Strided, has_lo: i32, lo_bits: u64, has_hi: i32, hi_bits: u64);
    where_cond in ELEMENTWISE for ALL (n: u64, out: u64, cond: u64, lc: Strided, a: u64, la: Strided, b: u64, lb: Strided);
    cast in COPY for ALL (to_code: i32, n: u64, out: u64, a: u64, la: Strided);
    copy in COPY for WIDTHS (n: u64, dst: u64, ld: Strided, src: u64, ls: Strided);
    fill in COPY for WIDTHS (n: u64, out: u64, bits: u64);
    index_select in GATHER for WIDTHS (n: u64, out: u64, src: u64, ls: Strided, dim: i32, index: u64, li: Strided, index_i32: i32, size: u64, fault: u64);
    class_rows in GATHER for LOSSES (n: u64, classes: u64, out: u64, target: u64, lt: Strided, num: u64, den: u64, fault: u64);
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
    layer_norm_rows in REDUCE for NORMS (rows: u64, len: u64, eps: u64, input: u64, weight: u64, bias: u64, out: u64, mean: u64, rstd: u64);
    layer_norm_backward_rows in REDUCE for NORMS (rows: u64, len: u64, input: u64, mean: u64, rstd: u64, weight: u64, grad: u64, gx: u64);
    random_fill in RANDOM for DRAWN (n: u64, out: u64, seed: u64, normal: i32);
    randint in RANDOM for INDICES (n: u64, out: u64, seed: u64, low: u64, range: u64);
}
