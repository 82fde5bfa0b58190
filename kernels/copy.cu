// Copies: dtype conversion (cast) of a strided view into a contiguous output, strided writes into a
// view (cat, in-place updates), and fills.

// The dtype a cast writes, `dst`, is a `PL_DTYPE_*` code of `kernels/codes.rs` (build.rs writes
// them into the `ops.cuh` read before this file).

template <typename D> struct IsFloat { static const bool value = false; };
template <> struct IsFloat<float> { static const bool value = true; };
template <> struct IsFloat<double> { static const bool value = true; };
template <> struct IsFloat<f16> { static const bool value = true; };
template <> struct IsFloat<bf16> { static const bool value = true; };

// As the CPU backend: through f64 when either side is a float, through i64 otherwise.
template <typename S, typename D> __device__ __forceinline__ D convert(S x) {
    if (IsFloat<S>::value || IsFloat<D>::value) return Cast<D>::from_f64(to_f64(x));
    return Cast<D>::from_i64(to_i64(x));
}

template <typename S, typename D>
__device__ void cast_to(u64 n, D* out, const S* in, const Strided& ls) {
    GRID_STRIDE(i, n) { out[i] = convert<S, D>(in[offset_of(ls, i)]); }
}

#define CAST(S, NAME)                                                                          \
    extern "C" __global__ void cast_##NAME(int dst, u64 n, void* out, const S* in,             \
                                           Strided ls) {                                       \
        switch (dst) {                                                                         \
            case PL_DTYPE_F32: cast_to<S, float>(n, (float*)out, in, ls); break;               \
            case PL_DTYPE_F64: cast_to<S, double>(n, (double*)out, in, ls); break;             \
            case PL_DTYPE_F16: cast_to<S, f16>(n, (f16*)out, in, ls); break;                   \
            case PL_DTYPE_BF16: cast_to<S, bf16>(n, (bf16*)out, in, ls); break;                \
            case PL_DTYPE_I64: cast_to<S, i64>(n, (i64*)out, in, ls); break;                   \
            case PL_DTYPE_I32: cast_to<S, int>(n, (int*)out, in, ls); break;                   \
            case PL_DTYPE_U8: cast_to<S, u8>(n, (u8*)out, in, ls); break;                      \
            case PL_DTYPE_BOOL:                                                                \
            default: cast_to<S, bool>(n, (bool*)out, in, ls); break;                           \
        }                                                                                      \
    }
FOR_ALL_DTYPES(CAST)

// Strided → strided copies move bits, so one kernel per element width serves every dtype.
#define COPY(T, W)                                                                             \
    extern "C" __global__ void copy_##W(u64 n, T* dst, Strided ld, const T* src, Strided ls) { \
        GRID_STRIDE(i, n) { dst[offset_of(ld, i)] = src[offset_of(ls, i)]; }                   \
    }
COPY(u8, b1)
COPY(unsigned short, b2)
COPY(unsigned, b4)
COPY(u64, b8)

#define FILL(T, W)                                                                             \
    extern "C" __global__ void fill_##W(u64 n, T* out, u64 bits) {                             \
        T v = from_bits<T>(bits);                                                              \
        GRID_STRIDE(i, n) { out[i] = v; }                                                      \
    }
FILL(u8, b1)
FILL(unsigned short, b2)
FILL(unsigned, b4)
FILL(u64, b8)
