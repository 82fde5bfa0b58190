// CUDA on the host: what `kernels/*.cu` need from CUDA, so that the same files compile with the
// C++ compiler for placelab's *emulated* CUDA devices (`PLACELAB_EMULATE_CUDA`). The build
// (`build.rs`) includes this header, then `common.cuh`, then one kernel file; `emulator.cpp`
// runs a launch's blocks, each block's threads as fibers with real `__syncthreads` barriers.
//
// What it provides, and how it differs from a GPU:
// - `threadIdx`/`blockIdx`/`blockDim`/`gridDim`: the fiber now running (`pl_current`).
// - `__shared__`: one copy per OS thread; a block runs on one OS thread from start to end, so
//   its threads share it and concurrent blocks do not.
// - `__syncthreads()`: a barrier across the block's threads that also checks they all wait at
//   the same one (a divergent barrier is undefined on a GPU; here it is an error).
// - intrinsics with the PTX semantics the kernels rely on (float-to-integer conversions
//   saturate; NaN converts as PTX's `cvt` does, not as C++'s cast).
// - f16 conversions in software, round to nearest even, where the GPU path uses inline PTX.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#define PLACELAB_HOST 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static thread_local

struct pl_dim3 {
    unsigned x, y, z;
};

// The indices of one CUDA thread; the scheduler points `pl_current` at the running one.
struct pl_thread {
    pl_dim3 thread_idx, block_idx, block_dim, grid_dim;
};
// Hidden: kernels find it without going through the dynamic linker.
extern __attribute__((visibility("hidden"))) thread_local pl_thread* pl_current;

#define threadIdx (pl_current->thread_idx)
#define blockIdx (pl_current->block_idx)
#define blockDim (pl_current->block_dim)
#define gridDim (pl_current->grid_dim)

void pl_syncthreads(const char* file, int line);
#define __syncthreads() pl_syncthreads(__FILE__, __LINE__)

static inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}

// PTX `cvt.rzi.s64.f64` / `cvt.rzi.s32.f64`: round toward zero, saturate at the type's range;
// NaN gives 1 << (bits - 1), the type's minimum (PTX ISA, "cvt": NaN is zero only when the
// source is not .f64 and the destination is not 64-bit).
static inline long long __double2ll_rz(double v) {
    if (v != v || v <= -9223372036854775808.0) return INT64_MIN;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    return (long long)v;
}
static inline int __double2int_rz(double v) {
    if (v != v || v <= -2147483648.0) return INT32_MIN;
    if (v >= 2147483647.0) return INT32_MAX;
    return (int)v;
}

// f16 <-> f32, bit for bit with the GPU's `cvt` on every finite value and infinity; a NaN keeps
// its sign and top payload bits and is made quiet (a GPU may return its canonical NaN instead).
static inline float pl_f16_bits_to_f32(unsigned short h) {
    unsigned sign = (unsigned)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) return __uint_as_float(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
    if (exp == 0) return __uint_as_float(sign | __float_as_uint((float)mant * 0x1p-24f));
    return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}
static inline unsigned short pl_f32_to_f16_bits(float f) {
    unsigned x = __float_as_uint(f);
    unsigned sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // 65520 and up round to inf
    if (a >= 0x38800000u) {  // a normal f16
        unsigned h = ((a >> 23) - 112u) << 10 | ((a >> 13) & 0x3ffu), rest = a & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;  // a carry moves into the exponent
        return (unsigned short)(sign | h);
    }
    // Subnormal or zero: in units of 2^-24, rounded to nearest even (exact scaling by 2^24).
    return (unsigned short)(sign | (unsigned)nearbyintf(__uint_as_float(a) * 16777216.0f));
}
