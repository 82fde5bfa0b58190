// Gathers by index entries, made where the entries are so that the host never reads them back:
// index_select's, and the class rows of nll_loss and its gradient. Each kernel checks the
// entries as it reads them and writes the first wrong one into `fault` for the host to report
// at its next wait for the device (`engine/src/backend/gpu/checks.rs`).

// index_select in one launch: output element `i` (row-major over the output's shape, which is
// `ls.shape`) reads the source at the same coordinates, except along dim `dim`, where coordinate
// `c` reads the source at the index tensor's entry `c` (i64, or i32 with `index_i32`, viewed by
// `li`; a negative one counts from the end of the dim, of `size`). The kernel checks each entry
// as it reads it: one outside the dim gives zeros and is written into `fault` (the entry, then
// 1), which the host reads at its next wait for the device (`engine/src/backend/gpu/checks.rs`); a null `fault`
// means the host checked the entries already.
//
// When the dims after `dim` are one gap-free run of at least `GATHER_ROW_MIN` elements (rows of
// a matrix, the usual case), each selected run is a row to copy: a block per row, 16-byte packs
// where both ends allow, one address computation per row instead of a division per element per
// dim. The host sizes the grid to the rows then (`gpu::ops::index_select`).
#define GATHER_ROW_MIN 128

struct Positions {
    const void* index;
    Strided li;
    int index_i32;
    u64 size;
    i64* fault;
};

// The source position along the selected dim for coordinate `c`, or -1 for an entry outside it.
__device__ __forceinline__ i64 position(const Positions& at, u64 c) {
    const u64 off = offset_of(at.li, c);
    const i64 raw = at.index_i32 ? (i64)((const int*)at.index)[off] : ((const i64*)at.index)[off];
    const i64 p = raw < 0 ? raw + (i64)at.size : raw;
    if (p >= 0 && p < (i64)at.size) return p;
    if (at.fault) {
        at.fault[0] = raw;
        at.fault[1] = 1;
    }
    return -1;
}

template <typename T>
__device__ void gather_rows(T* out, const T* src, const Strided& ls, int dim, const Positions& at,
                            u64 n) {
    const u64 inner = ls.shape[ls.rank - 1], rows = n / inner;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        u64 off = ls.offset, rest = row;
        bool valid = true;
        for (int d = dim; d >= 0; --d) {
            const u64 c = rest % ls.shape[d];
            rest /= ls.shape[d];
            if (d == dim) {
                const i64 p = position(at, c);
                valid = p >= 0;
                off += (valid ? (u64)p : 0) * ls.strides[d];
            } else {
                off += c * ls.strides[d];
            }
        }
        T* to = out + row * inner;
        if (!valid) {
            for (u64 j = threadIdx.x; j < inner; j += blockDim.x) to[j] = (T)0;
            continue;
        }
        const T* from = src + off;
        const u64 packs = ((u64)from & 15) == 0 && ((u64)to & 15) == 0 ? inner / Pack<T>::N : 0;
        const Pack<T>* pf = (const Pack<T>*)from;
        Pack<T>* pt = (Pack<T>*)to;
        const u64 step = blockDim.x;
        u64 p = threadIdx.x;
        // Four loads issued before their stores: the source and destination may not overlap,
        // but the compiler cannot know that, and would otherwise wait out each load in turn.
        for (; p + 3 * step < packs; p += 4 * step) {
            const Pack<T> a = pf[p], b = pf[p + step], c = pf[p + 2 * step], d = pf[p + 3 * step];
            pt[p] = a;
            pt[p + step] = b;
            pt[p + 2 * step] = c;
            pt[p + 3 * step] = d;
        }
        for (; p < packs; p += step) pt[p] = pf[p];
        for (u64 j = packs * Pack<T>::N + threadIdx.x; j < inner; j += blockDim.x) to[j] = from[j];
    }
}

#define GATHER(T, W)                                                                           \
    extern "C" __global__ void index_select_##W(u64 n, T* out, const T* src, Strided ls,       \
                                                int dim, const void* index, Strided li,        \
                                                int index_i32, u64 size, i64* fault) {         \
        const Positions at = {index, li, index_i32, size, fault};                              \
        if (dim == (int)ls.rank - 2 && ls.strides[ls.rank - 1] == 1 &&                         \
            ls.shape[ls.rank - 1] >= GATHER_ROW_MIN) {                                         \
            gather_rows<T>(out, src, ls, dim, at, n);                                          \
            return;                                                                            \
        }                                                                                      \
        GRID_STRIDE(i, n) {                                                                    \
            u64 off = ls.offset, rest = i;                                                     \
            bool valid = true;                                                                 \
            for (int d = (int)ls.rank - 1; d >= 0; --d) {                                      \
                u64 c = rest % ls.shape[d];                                                    \
                rest /= ls.shape[d];                                                           \
                if (d == dim) {                                                                \
                    const i64 p = position(at, c);                                             \
                    valid = p >= 0;                                                            \
                    off += (valid ? (u64)p : 0) * ls.strides[d];                               \
                } else {                                                                       \
                    off += c * ls.strides[d];                                                  \
                }                                                                              \
            }                                                                                  \
            out[i] = valid ? src[off] : (T)0;                                                  \
        }                                                                                      \
    }
GATHER(u8, b1)
GATHER(unsigned short, b2)
GATHER(unsigned, b4)
GATHER(u64, b8)

// nll_loss's rows, made where the class indices are, so the host never reads them back (a wait
// that drained the queue twice a training step): row r of `classes` values is `v` at column
// `target[r]` and 0 elsewhere, where `v` is −1 (the forward's picks) or, with `num` and `den`
// (0-d values on the device), −num/den (the backward's gradient, −g / total_weight, in one launch
// instead of three). A class outside 0..classes leaves its row 0 and writes itself into `fault`
// (the class, then 1), which the host reads at its next wait for the device (`engine/src/backend/gpu/checks.rs`)
// and reports as the op's error. PyTorch's device assert ends the context instead.
#define CLASS_ROWS(T, NAME)                                                                    \
    extern "C" __global__ void class_rows_##NAME(u64 n, u64 classes, T* out, const i64* target, \
                                                 Strided lt, const T* num, const T* den,       \
                                                 i64* fault) {                                 \
        const T v = num ? -(num[0] / den[0]) : (T)-1;                                          \
        GRID_STRIDE(i, n) {                                                                    \
            const u64 row = i / classes, col = i - row * classes;                              \
            const i64 t = target[offset_of(lt, row)];                                          \
            out[i] = (i64)col == t ? v : (T)0;                                                 \
            if (col == 0 && (t < 0 || t >= (i64)classes)) {                                    \
                fault[0] = t;                                                                  \
                fault[1] = 1;                                                                  \
            }                                                                                  \
        }                                                                                      \
    }
CLASS_ROWS(float, f32)
CLASS_ROWS(double, f64)
