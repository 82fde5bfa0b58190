// Shared by every kernel file: placelab prepends this text before NVRTC compiles a `.cu`, so the
// kernels need no CUDA headers (no cuda_fp16.h / cuda_bf16.h) and no include path.
//
// Element types, named as the engine's dtypes. f16 and bf16 are stored as their 16 bits and
// computed in f32; f32 accumulates sums in f64, as the CPU backend does.

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned char u8;

struct __align__(2) f16 { unsigned short bits; };
struct __align__(2) bf16 { unsigned short bits; };

// The largest number of dims a strided operand may have once adjacent dims are merged
// (`Strided` is passed by value; the host merges dims and refuses deeper layouts).
#define MAX_DIMS 8

// One operand's view, as the host's `Layout` after merging dims: element offset, sizes, strides.
struct Strided {
    u64 offset;
    u64 rank;
    u64 shape[MAX_DIMS];
    u64 strides[MAX_DIMS];
};

// The storage offset of the `i`-th element (row-major) of the view.
__device__ __forceinline__ u64 offset_of(const Strided& l, u64 i) {
    // Contiguous and sliced views merge to one dim: skip the 64-bit divisions (slow on a GPU).
    if (l.rank == 1) return l.offset + i * l.strides[0];
    u64 off = l.offset;
    for (int d = (int)l.rank - 1; d >= 0; --d) {
        u64 s = l.shape[d];
        off += (i % s) * l.strides[d];
        i /= s;
    }
    return off;
}

// 16 bytes of elements, read or written in one access (`ld.global.v4`): the contiguous case of
// the element-wise kernels moves a pack per thread, as PyTorch's vectorized loops do.
template <typename T> struct __align__(16) Pack {
    enum { N = 16 / sizeof(T) };
    T v[N];
};

// Whether the view `l` of `base` is gap-free from an address a `Pack` can be read at.
template <typename T> __device__ __forceinline__ bool packable(const T* base, const Strided& l) {
    return l.rank == 1 && l.strides[0] == 1 && ((u64)(base + l.offset) & 15) == 0;
}

#define PL_INFINITY __int_as_float(0x7f800000)

#define GRID_STRIDE(i, n) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (u64)blockDim.x * gridDim.x)

// ---- conversions -------------------------------------------------------------------------------

// On a GPU the f16 conversions are one PTX instruction each; compiled for the host (the emulated
// devices, `host/cuda_host.h`) they are the header's software conversions, same rounding.
__device__ __forceinline__ float f16_to_f32(f16 h) {
#ifdef PLACELAB_HOST
    return pl_f16_bits_to_f32(h.bits);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
    return f;
#endif
}

__device__ __forceinline__ f16 f32_to_f16(float f) {
    f16 h;
#ifdef PLACELAB_HOST
    h.bits = pl_f32_to_f16_bits(f);
#else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
#endif
    return h;
}

__device__ __forceinline__ float bf16_to_f32(bf16 b) {
    return __uint_as_float(((unsigned)b.bits) << 16);
}

// Round to nearest, ties to even; NaN stays a (quiet) NaN.
__device__ __forceinline__ bf16 f32_to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    bf16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        b.bits = (unsigned short)((u >> 16) | 0x0040u);
    } else {
        b.bits = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    return b;
}

// Every element type to and from f64 (the engine's casts go through f64, as the CPU's do).
__device__ __forceinline__ double to_f64(float x) { return (double)x; }
__device__ __forceinline__ double to_f64(double x) { return x; }
__device__ __forceinline__ double to_f64(f16 x) { return (double)f16_to_f32(x); }
__device__ __forceinline__ double to_f64(bf16 x) { return (double)bf16_to_f32(x); }
__device__ __forceinline__ double to_f64(i64 x) { return (double)x; }
__device__ __forceinline__ double to_f64(int x) { return (double)x; }
__device__ __forceinline__ double to_f64(u8 x) { return (double)x; }
__device__ __forceinline__ double to_f64(bool x) { return x ? 1.0 : 0.0; }

// Integers convert through i64 so that i64 → i32 wraps as Rust's `as` does.
__device__ __forceinline__ i64 to_i64(float x) { return (i64)x; }
__device__ __forceinline__ i64 to_i64(double x) { return (i64)x; }
__device__ __forceinline__ i64 to_i64(f16 x) { return (i64)f16_to_f32(x); }
__device__ __forceinline__ i64 to_i64(bf16 x) { return (i64)bf16_to_f32(x); }
__device__ __forceinline__ i64 to_i64(i64 x) { return x; }
__device__ __forceinline__ i64 to_i64(int x) { return (i64)x; }
__device__ __forceinline__ i64 to_i64(u8 x) { return (i64)x; }
__device__ __forceinline__ i64 to_i64(bool x) { return x ? 1 : 0; }

template <typename T> struct Cast;
template <> struct Cast<float> {
    static __device__ __forceinline__ float from_f64(double v) { return (float)v; }
    static __device__ __forceinline__ float from_i64(i64 v) { return (float)v; }
};
template <> struct Cast<double> {
    static __device__ __forceinline__ double from_f64(double v) { return v; }
    static __device__ __forceinline__ double from_i64(i64 v) { return (double)v; }
};
// f64 → f16/bf16 rounds through f32, as PyTorch's `Half(float)`/`BFloat16(float)` and the CPU
// backend do.
template <> struct Cast<f16> {
    static __device__ __forceinline__ f16 from_f64(double v) { return f32_to_f16((float)v); }
    static __device__ __forceinline__ f16 from_i64(i64 v) { return from_f64((double)v); }
};
template <> struct Cast<bf16> {
    static __device__ __forceinline__ bf16 from_f64(double v) { return f32_to_bf16((float)v); }
    static __device__ __forceinline__ bf16 from_i64(i64 v) { return from_f64((double)v); }
};
// Float → integer saturates (PTX `cvt.rzi`) and maps NaN to 0, as Rust's `as` does. The NaN test
// is needed: from an f64, `cvt` gives the type's minimum for NaN (PTX ISA, "cvt").
template <> struct Cast<i64> {
    static __device__ __forceinline__ i64 from_f64(double v) { return isnan(v) ? 0 : __double2ll_rz(v); }
    static __device__ __forceinline__ i64 from_i64(i64 v) { return v; }
};
template <> struct Cast<int> {
    static __device__ __forceinline__ int from_f64(double v) { return isnan(v) ? 0 : __double2int_rz(v); }
    static __device__ __forceinline__ int from_i64(i64 v) { return (int)(unsigned)(u64)v; }
};
template <> struct Cast<u8> {
    static __device__ __forceinline__ u8 from_f64(double v) {
        return isnan(v) ? (u8)0 : (u8)(v <= 0.0 ? 0.0 : (v >= 255.0 ? 255.0 : v));
    }
    static __device__ __forceinline__ u8 from_i64(i64 v) { return (u8)(u64)v; }
};
template <> struct Cast<bool> {
    static __device__ __forceinline__ bool from_f64(double v) { return v != 0.0; }
    static __device__ __forceinline__ bool from_i64(i64 v) { return v != 0; }
};

// ---- arithmetic types ---------------------------------------------------------------------------
// `Math<T>::Acc` is the type an element is computed in; `load`/`store` convert to and from it.

template <typename T> struct Math {
    typedef T Acc;
    static __device__ __forceinline__ Acc load(T x) { return x; }
    static __device__ __forceinline__ T store(Acc x) { return x; }
};
template <> struct Math<f16> {
    typedef float Acc;
    static __device__ __forceinline__ float load(f16 x) { return f16_to_f32(x); }
    static __device__ __forceinline__ f16 store(float x) { return f32_to_f16(x); }
};
template <> struct Math<bf16> {
    typedef float Acc;
    static __device__ __forceinline__ float load(bf16 x) { return bf16_to_f32(x); }
    static __device__ __forceinline__ bf16 store(float x) { return f32_to_bf16(x); }
};

// A scalar argument travels as the bits of the element (little-endian, in the low bytes).
template <typename T> __device__ __forceinline__ T from_bits(u64 bits) {
    T v;
    memcpy(&v, &bits, sizeof(T));
    return v;
}

// One kernel per dtype: `INSTANTIATE(name)` expands `name(T, suffix)` for every element type.
#define FOR_ALL_DTYPES(M) \
    M(float, f32) M(double, f64) M(f16, f16) M(bf16, bf16) M(i64, i64) M(int, i32) M(u8, u8) M(bool, bool)
#define FOR_FLOAT_DTYPES(M) M(float, f32) M(double, f64) M(f16, f16) M(bf16, bf16)
#define FOR_HALF_DTYPES(M) M(f16, f16) M(bf16, bf16)
#define FOR_INT_DTYPES(M) M(i64, i64) M(int, i32) M(u8, u8) M(bool, bool)
