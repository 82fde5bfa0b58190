// Random fills made on the device: `rand`, `randn` and `randint`, from a counter-based generator
// (Philox4x32-10, as PyTorch's CUDA generator and cuRAND use). Each value is a function of the
// seed and its own index alone, so the threads need no state and no order, and the CPU backend
// (`engine/src/backend/cpu/random.rs`) computes the same bits: a seed gives one tensor on every device.
// (Compiled for the host, the emulator gives those bits exactly. On a GPU, `log` may round an
// f64 tail value, beyond ±3.65, differently in its last bit.)
//
// Group `g` of a fill is Philox's block at the counter (g, g >> 32, 0, 0), the seed as its key:
// four 32-bit words. An f32 takes one word, an f64 or an i64 two (the first the high half).
// Sixteen groups make a batch of 64 f32s or 32 f64s, laid out word by word: element 16j + l of
// batch b takes word j (f32) or words 2j, 2j + 1 (f64) of group 16b + l. A thread computes one
// group, and a warp's threads write consecutive elements.
//
// Normals come from a 256-layer ziggurat (`random_tables.cuh`, the CPU's tables to the bit):
// the word's low 8 bits pick the layer, bit 8 the sign and the top bits the position. About 98.5%
// of values are one multiply; a value that lands in a wedge or in the tail draws more from its
// own stream, the blocks at (i, i >> 32, 1, attempt) for element i.

#include "random_tables.cuh"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

struct Words {
    unsigned w[4];
};

__device__ __forceinline__ Words philox(unsigned c0, unsigned c1, unsigned c2, unsigned c3, u64 seed) {
    unsigned k0 = (unsigned)seed, k1 = (unsigned)(seed >> 32);
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        u64 p0 = (u64)PHILOX_M0 * c0, p1 = (u64)PHILOX_M1 * c2;
        unsigned n0 = (unsigned)(p1 >> 32) ^ c1 ^ k0, n2 = (unsigned)(p0 >> 32) ^ c3 ^ k1;
        c1 = (unsigned)p1;
        c3 = (unsigned)p0;
        c0 = n0;
        c2 = n2;
    }
    Words out = {{c0, c1, c2, c3}};
    return out;
}

__device__ __forceinline__ Words philox_group(u64 g, u64 seed) {
    return philox((unsigned)g, (unsigned)(g >> 32), 0u, 0u, seed);
}

__device__ __forceinline__ u64 join(unsigned high, unsigned low) { return ((u64)high << 32) | low; }
// 53 random bits as a double in [0, 1), and in (0, 1).
__device__ __forceinline__ double unit53(unsigned high, unsigned low) {
    return (double)(join(high, low) >> 11) * 0x1p-53;
}
__device__ __forceinline__ double open53(unsigned high, unsigned low) {
    return ((double)(join(high, low) >> 11) + 0.5) * 0x1p-53;
}

__device__ __forceinline__ double zig_f64(const unsigned long long* bits, int i) {
    return from_bits<double>(bits[i]);
}

// One width of the ziggurat: a draw `h` whose position lies above its low ZIG_SHIFT32 (f32) or
// ZIG_SHIFT64 (f64) bits.
template <typename T> struct Zig;
template <> struct Zig<float> {
    typedef unsigned Draw;
    static __device__ __forceinline__ unsigned position(unsigned h) { return h >> ZIG_SHIFT32; }
    static __device__ __forceinline__ bool fast(unsigned h, float* v) {
        *v = (float)position(h) * from_bits<float>(ZIG_SCALE32_BITS[h & 0x1ff]);
        return position(h) < ZIG_ACCEPT32_BITS[h & 0xff];
    }
    static __device__ __forceinline__ double span() { return (double)(1u << (32 - ZIG_SHIFT32)); }
    static __device__ __forceinline__ unsigned next(const Words& r) { return r.w[2]; }
};
template <> struct Zig<double> {
    typedef u64 Draw;
    static __device__ __forceinline__ u64 position(u64 h) { return h >> ZIG_SHIFT64; }
    static __device__ __forceinline__ bool fast(u64 h, double* v) {
        *v = (double)position(h) * from_bits<double>(ZIG_SCALE64_BITS[h & 0x1ff]);
        return position(h) < ZIG_ACCEPT64_BITS[h & 0xff];
    }
    static __device__ __forceinline__ double span() { return (double)(1ull << (64 - ZIG_SHIFT64)); }
    static __device__ __forceinline__ u64 next(const Words& r) { return join(r.w[2], r.w[3]); }
};

// The normal that starts from draw `h` of element `i`, once `h`'s own point was refused: a wedge
// point is accepted under the curve, a tail point by Marsaglia's exponential proposals; a refused
// wedge point is replaced by a new draw.
template <typename T>
__device__ T ziggurat_finish(typename Zig<T>::Draw h, u64 i, u64 seed) {
    const double tail = from_bits<double>(ZIG_TAIL_START_BITS);
    for (unsigned attempt = 0;; ++attempt) {
        T v;
        if (Zig<T>::fast(h, &v)) return v;
        const int layer = (int)(h & 0xff);
        const double sign = (h & 0x100) ? -1.0 : 1.0;
        Words r = philox((unsigned)i, (unsigned)(i >> 32), 1u, attempt, seed);
        if (layer == 0) {
            double x = -log(open53(r.w[0], r.w[1])) / tail;
            if (-2.0 * log(open53(r.w[2], r.w[3])) >= x * x) return (T)(sign * (tail + x));
            continue;
        }
        double x = (double)Zig<T>::position(h) * zig_f64(ZIG_X_BITS, layer) / Zig<T>::span();
        double f0 = zig_f64(ZIG_F_BITS, layer), f1 = zig_f64(ZIG_F_BITS, layer + 1);
        if (f0 + (f1 - f0) * unit53(r.w[0], r.w[1]) < exp(-0.5 * x * x)) return (T)(sign * x);
        h = Zig<T>::next(r);
    }
}

__device__ __forceinline__ float normal_of(unsigned h, u64 i, u64 seed) {
    float v;
    return Zig<float>::fast(h, &v) ? v : ziggurat_finish<float>(h, i, seed);
}
__device__ __forceinline__ double normal_of(u64 h, u64 i, u64 seed) {
    double v;
    return Zig<double>::fast(h, &v) ? v : ziggurat_finish<double>(h, i, seed);
}

// The index of the `j`-th value of group `g`, for `per` values a group.
__device__ __forceinline__ u64 element_of(u64 g, int j, int per) {
    return (g / 16) * (16 * per) + 16 * j + g % 16;
}

// Groups a fill of `n` values needs: whole batches of 16.
__device__ __forceinline__ u64 groups_for(u64 n, int per) { return (n + 16 * per - 1) / (16 * per) * 16; }

// f32: a thread per group of four. Uniforms are the word's top 24 bits over 2^24.
extern "C" __global__ void random_fill_f32(u64 n, float* out, u64 seed, int normal) {
    GRID_STRIDE(g, groups_for(n, 4)) {
        Words r = philox_group(g, seed);
        for (int j = 0; j < 4; ++j) {
            u64 i = element_of(g, j, 4);
            if (i < n) out[i] = normal ? normal_of(r.w[j], i, seed) : (float)(r.w[j] >> 8) * 0x1p-24f;
        }
    }
}

// f64: a thread per group of two, 64 bits each. Uniforms take 53 of them.
extern "C" __global__ void random_fill_f64(u64 n, double* out, u64 seed, int normal) {
    GRID_STRIDE(g, groups_for(n, 2)) {
        Words r = philox_group(g, seed);
        for (int j = 0; j < 2; ++j) {
            u64 i = element_of(g, j, 2), h = join(r.w[2 * j], r.w[2 * j + 1]);
            if (i < n) out[i] = normal ? normal_of(h, i, seed) : (double)(h >> 11) * 0x1p-53;
        }
    }
}

// randint: `low + (64 bits mod range)`, as PyTorch's `random_from_to` with a 64-bit range (the
// bias is below range / 2^64). `low` is an i64's bits; the sum wraps as two's complement does.
extern "C" __global__ void randint_i64(u64 n, i64* out, u64 seed, u64 low, u64 range) {
    GRID_STRIDE(g, groups_for(n, 2)) {
        Words r = philox_group(g, seed);
        for (int j = 0; j < 2; ++j) {
            u64 i = element_of(g, j, 2);
            if (i < n) out[i] = (i64)(low + join(r.w[2 * j], r.w[2 * j + 1]) % range);
        }
    }
}
