// Element-wise kernels: binary arithmetic, comparisons, unary math, clamp and where, with
// broadcasting through strided views. The output is always contiguous; each input is read through
// its own `Strided` view of the output's shape. The op codes (`PL_BINARY_ADD` …) are those of
// `kernels/codes.rs`, which build.rs writes into the `ops.cuh` read before this file.

// ---- binary ------------------------------------------------------------------------------------
// `PL_BINARY_*`: add, sub, mul, div, pow, maximum, minimum, and ReLU's gradient (RELU_BACKWARD: a
// where b > 0 or NaN, else 0: PyTorch's threshold_backward)

// NaN wins in maximum/minimum, as in torch.maximum.
template <typename A> struct Binary {  // f32 and f64 (f16/bf16 compute in f32)
    static __device__ __forceinline__ A apply(int op, A a, A b) {
        switch (op) {
            case PL_BINARY_ADD: return a + b;
            case PL_BINARY_SUB: return a - b;
            case PL_BINARY_MUL: return a * b;
            case PL_BINARY_DIV: return a / b;
            case PL_BINARY_POW: return pow(a, b);
            case PL_BINARY_MAXIMUM: return isnan(a) ? a : (isnan(b) ? b : (a > b ? a : b));
            case PL_BINARY_RELU_BACKWARD: return b <= (A)0 ? (A)0 : a;
            case PL_BINARY_MINIMUM:
            default: return isnan(a) ? a : (isnan(b) ? b : (a < b ? a : b));
        }
    }
};

// Integers wrap on overflow, as PyTorch's (and Rust's wrapping_*) do: the arithmetic runs on the
// unsigned type of the same width, where wrapping is defined.
template <typename A, typename U> struct IntBinary {
    static __device__ __forceinline__ A wrapping_pow(A base, A exp) {
        U result = 1, b = (U)base;
        // The whole exponent, in its own width: an i64 exponent may pass 2^32 (PyTorch's
        // loop takes all of it). Negative exponents are rejected by the host.
        U e = (U)exp;
        while (e) {
            if (e & 1u) result *= b;
            b *= b;
            e >>= 1;
        }
        return (A)result;
    }
    static __device__ __forceinline__ A apply(int op, A a, A b) {
        switch (op) {
            case PL_BINARY_ADD: return (A)((U)a + (U)b);
            case PL_BINARY_SUB: return (A)((U)a - (U)b);
            case PL_BINARY_MUL: return (A)((U)a * (U)b);
            case PL_BINARY_DIV:
                if (b == 0) return 0;
                // MIN / -1 wraps to MIN (signed types only: for u8, (A)-1 is 255)
                if ((A)-1 < (A)0 && b == (A)-1) return (A)((U)0 - (U)a);
                return a / b;
            case PL_BINARY_POW: return wrapping_pow(a, b);
            case PL_BINARY_MAXIMUM: return a > b ? a : b;
            case PL_BINARY_RELU_BACKWARD: return b <= (A)0 ? (A)0 : a;
            case PL_BINARY_MINIMUM:
            default: return a < b ? a : b;
        }
    }
};
template <> struct Binary<i64> : IntBinary<i64, u64> {};
template <> struct Binary<int> : IntBinary<int, unsigned> {};
template <> struct Binary<u8> : IntBinary<u8, u8> {};

// Bool arithmetic as PyTorch defines it: `+` is or, `*` is and.
template <> struct Binary<bool> {
    static __device__ __forceinline__ bool apply(int op, bool a, bool b) {
        switch (op) {
            case PL_BINARY_ADD: return a || b;
            case PL_BINARY_SUB: return a != b;
            case PL_BINARY_MUL: return a && b;
            case PL_BINARY_DIV: return a;
            case PL_BINARY_POW: return a || !b;
            case PL_BINARY_MAXIMUM: return a || b;
            case PL_BINARY_RELU_BACKWARD: return a && b;
            case PL_BINARY_MINIMUM:
            default: return a && b;
        }
    }
};

template <typename T>
__device__ void binary_kernel(int op, u64 n, T* out, const T* a, const Strided& la, const T* b,
                              const Strided& lb) {
    typedef Math<T> M;
    typedef Binary<typename M::Acc> B;
    if (packable(a, la) && packable(b, lb) && ((u64)out & 15) == 0) {
        const u64 packs = n / Pack<T>::N;
        const Pack<T>* pa = (const Pack<T>*)(a + la.offset);
        const Pack<T>* pb = (const Pack<T>*)(b + lb.offset);
        GRID_STRIDE(p, packs) {
            Pack<T> x = pa[p], y = pb[p], r;
            for (int k = 0; k < Pack<T>::N; ++k) r.v[k] = M::store(B::apply(op, M::load(x.v[k]), M::load(y.v[k])));
            ((Pack<T>*)out)[p] = r;
        }
        GRID_STRIDE(j, n - packs * Pack<T>::N) {
            const u64 i = packs * Pack<T>::N + j;
            out[i] = M::store(B::apply(op, M::load(a[la.offset + i]), M::load(b[lb.offset + i])));
        }
        return;
    }
    GRID_STRIDE(i, n) {
        out[i] = M::store(Binary<typename M::Acc>::apply(op, M::load(a[offset_of(la, i)]),
                                                         M::load(b[offset_of(lb, i)])));
    }
}

#define BINARY(T, S)                                                                           \
    extern "C" __global__ void binary_##S(int op, u64 n, T* out, const T* a, Strided la,       \
                                          const T* b, Strided lb) {                            \
        binary_kernel<T>(op, n, out, a, la, b, lb);                                            \
    }
FOR_ALL_DTYPES(BINARY)

// ---- comparisons ---------------------------------------------------------------------------------
// `PL_CMP_*`: eq, ne, lt, le, gt, ge. NaN compares unequal to everything.

template <typename A> __device__ __forceinline__ bool compare(int op, A a, A b) {
    switch (op) {
        case PL_CMP_EQ: return a == b;
        case PL_CMP_NE: return a != b;
        case PL_CMP_LT: return a < b;
        case PL_CMP_LE: return a <= b;
        case PL_CMP_GT: return a > b;
        case PL_CMP_GE:
        default: return a >= b;
    }
}

#define COMPARE(T, S)                                                                          \
    extern "C" __global__ void compare_##S(int op, u64 n, bool* out, const T* a, Strided la,   \
                                           const T* b, Strided lb) {                           \
        typedef Math<T> M;                                                                     \
        GRID_STRIDE(i, n) {                                                                    \
            out[i] = compare(op, M::load(a[offset_of(la, i)]), M::load(b[offset_of(lb, i)]));  \
        }                                                                                      \
    }
FOR_ALL_DTYPES(COMPARE)

// ---- a half-precision tensor with a Rust number ------------------------------------------------
// The number stays f32 (PyTorch's "opmath" type for f16/bf16) instead of being rounded to the
// tensor's dtype first. `reverse` computes `number op a` (for `2.0 - h`).

#define BINARY_NUMBER(T, S)                                                                    \
    extern "C" __global__ void binary_number_##S(int op, u64 n, T* out, const T* a,            \
                                                 Strided la, float number, int reverse) {      \
        typedef Math<T> M;                                                                     \
        GRID_STRIDE(i, n) {                                                                    \
            float x = M::load(a[offset_of(la, i)]);                                            \
            out[i] = M::store(reverse ? Binary<float>::apply(op, number, x)                    \
                                      : Binary<float>::apply(op, x, number));                  \
        }                                                                                      \
    }
FOR_HALF_DTYPES(BINARY_NUMBER)

#define COMPARE_NUMBER(T, S)                                                                   \
    extern "C" __global__ void compare_number_##S(int op, u64 n, bool* out, const T* a,        \
                                                  Strided la, float number) {                  \
        typedef Math<T> M;                                                                     \
        GRID_STRIDE(i, n) { out[i] = compare(op, M::load(a[offset_of(la, i)]), number); }      \
    }
FOR_HALF_DTYPES(COMPARE_NUMBER)

// ---- unary ---------------------------------------------------------------------------------------
// `PL_UNARY_*`: neg, abs, relu (every dtype); exp, log, sqrt, sigmoid, tanh, gelu,
// gelu_backward (GELU_DERIVATIVE) (float dtypes only; the host promotes integers first).

template <typename A> struct Unary {  // f32 and f64
    static __device__ __forceinline__ A apply(int op, A x) {
        switch (op) {
            case PL_UNARY_NEG: return -x;
            case PL_UNARY_ABS: return fabs(x);
            case PL_UNARY_RELU: return (x > (A)0 || isnan(x)) ? x : (A)0;
            case PL_UNARY_EXP: return exp(x);
            case PL_UNARY_LOG: return log(x);
            case PL_UNARY_SQRT: return sqrt(x);
            case PL_UNARY_SIGMOID: return (A)1 / ((A)1 + exp(-x));
            case PL_UNARY_TANH: return tanh(x);
            case PL_UNARY_GELU: return (A)0.5 * x * ((A)1 + erf(x * (A)0.70710678118654752440));
            case PL_UNARY_GELU_DERIVATIVE:
            default: {
                // Φ(x) + x·φ(x), in f64 as the CPU backend computes it.
                double d = (double)x;
                double cdf = 0.5 * (1.0 + erf(d * 0.70710678118654752440));
                double pdf = exp(-0.5 * d * d) * 0.39894228040143267794;
                return (A)(cdf + d * pdf);
            }
        }
    }
};

template <typename A, typename U> struct IntUnary {
    static __device__ __forceinline__ A apply(int op, A x) {
        A neg = (A)((U)0 - (U)x);
        switch (op) {
            case PL_UNARY_NEG: return neg;
            case PL_UNARY_ABS: return x < (A)0 ? neg : x;
            case PL_UNARY_RELU:
            default: return x > (A)0 ? x : (A)0;
        }
    }
};
template <> struct Unary<i64> : IntUnary<i64, u64> {};
template <> struct Unary<int> : IntUnary<int, unsigned> {};
template <> struct Unary<u8> : IntUnary<u8, u8> {};
template <> struct Unary<bool> {
    static __device__ __forceinline__ bool apply(int, bool x) { return x; }
};

template <typename T>
__device__ void unary_kernel(int op, u64 n, T* out, const T* a, const Strided& la) {
    typedef Math<T> M;
    typedef Unary<typename M::Acc> U;
    if (packable(a, la) && ((u64)out & 15) == 0) {
        const u64 packs = n / Pack<T>::N;
        const Pack<T>* pa = (const Pack<T>*)(a + la.offset);
        GRID_STRIDE(p, packs) {
            Pack<T> x = pa[p], r;
            for (int k = 0; k < Pack<T>::N; ++k) r.v[k] = M::store(U::apply(op, M::load(x.v[k])));
            ((Pack<T>*)out)[p] = r;
        }
        GRID_STRIDE(j, n - packs * Pack<T>::N) {
            const u64 i = packs * Pack<T>::N + j;
            out[i] = M::store(U::apply(op, M::load(a[la.offset + i])));
        }
        return;
    }
    GRID_STRIDE(i, n) { out[i] = M::store(U::apply(op, M::load(a[offset_of(la, i)]))); }
}

#define UNARY(T, S)                                                                            \
    extern "C" __global__ void unary_##S(int op, u64 n, T* out, const T* a, Strided la) {      \
        unary_kernel<T>(op, n, out, a, la);                                                    \
    }
FOR_ALL_DTYPES(UNARY)

// ---- clamp and where -----------------------------------------------------------------------------

// `lo`/`hi` are the bits of an element of T; NaN inputs stay NaN (no comparison holds).
#define CLAMP(T, S)                                                                            \
    extern "C" __global__ void clamp_##S(u64 n, T* out, const T* a, Strided la, int has_lo,    \
                                         u64 lo_bits, int has_hi, u64 hi_bits) {               \
        typedef Math<T> M;                                                                     \
        typename M::Acc lo = M::load(from_bits<T>(lo_bits));                                   \
        typename M::Acc hi = M::load(from_bits<T>(hi_bits));                                   \
        GRID_STRIDE(i, n) {                                                                    \
            typename M::Acc x = M::load(a[offset_of(la, i)]);                                  \
            if (has_lo && x < lo) x = lo;                                                      \
            if (has_hi && x > hi) x = hi;                                                      \
            out[i] = M::store(x);                                                              \
        }                                                                                      \
    }
FOR_ALL_DTYPES(CLAMP)

#define WHERE(T, S)                                                                            \
    extern "C" __global__ void where_cond_##S(u64 n, T* out, const bool* c, Strided lc,        \
                                              const T* a, Strided la, const T* b, Strided lb) {\
        GRID_STRIDE(i, n) {                                                                    \
            out[i] = c[offset_of(lc, i)] ? a[offset_of(la, i)] : b[offset_of(lb, i)];          \
        }                                                                                      \
    }
FOR_ALL_DTYPES(WHERE)
