// The codes the kernels of `kernels/*.cu` switch on, each written here once. Data only: each
// reader defines `op_codes!` before it includes this file.
//  - `build.rs` writes `ops.cuh`, which both compilers of the kernels read before `common.cuh`
//    (the host build for the emulator, NVRTC at run time): a C macro per code, the table's
//    prefix and the variant's name in capitals (`BinaryOp::ReluBackward` is
//    `#define PL_BINARY_RELU_BACKWARD 7`).
//  - `engine/src/backend/gpu/ops.rs` makes each table a function from the Rust enum to its code
//    (`binary_code(BinaryOp::Add)`), an exhaustive `match`: a variant missing here, or one the
//    enum does not have, fails the build.
// `build.rs` rejects a code used twice in one table.

op_codes! {
    /// The ops of `binary_*` and `binary_number_*` (`Binary<A>::apply`, `kernels/elementwise.cu`).
    binary_code(BinaryOp) as PL_BINARY {
        Add = 0,
        Sub = 1,
        Mul = 2,
        Div = 3,
        Pow = 4,
        Maximum = 5,
        Minimum = 6,
        ReluBackward = 7,
    }
    /// The ops of `compare_*` and `compare_number_*` (`compare`, `kernels/elementwise.cu`).
    compare_code(CmpOp) as PL_CMP {
        Eq = 0,
        Ne = 1,
        Lt = 2,
        Le = 3,
        Gt = 4,
        Ge = 5,
    }
    /// The ops of `unary_*` (`Unary<A>::apply`, `kernels/elementwise.cu`).
    unary_code(UnaryOp) as PL_UNARY {
        Neg = 0,
        Abs = 1,
        Relu = 2,
        Exp = 3,
        Log = 4,
        Sqrt = 5,
        Sigmoid = 6,
        Tanh = 7,
        Gelu = 8,
        GeluDerivative = 9,
    }
    /// The dtype a `cast_*` kernel writes (`kernels/copy.cu`).
    dtype_code(DType) as PL_DTYPE {
        F32 = 0,
        F64 = 1,
        F16 = 2,
        BF16 = 3,
        I64 = 4,
        I32 = 5,
        U8 = 6,
        Bool = 7,
    }
}
