// Row reductions over contiguous rows of `len` elements: sums and means, max/min with their
// index, and softmax. Long rows are split into `parts` chunks whose partial results a second
// kernel combines in a fixed order, so results never depend on timing; a row of one chunk is
// finished by the first kernel.
// Launched with blockDim.x == REDUCE_THREADS and at most 65536 blocks (`blocks()` in
// `engine/src/backend/gpu/reduce.rs`): each block walks the chunks (or rows) `blockIdx.x, blockIdx.x +
// gridDim.x, …`, so any count of rows fits the grid. The walk is the same for every thread of a
// block, so `__syncthreads` stays uniform, and `block_reduce` ends with a barrier, so the next
// chunk may reuse its shared memory.

#define REDUCE_THREADS 256

#define BLOCK_STRIDE(b, n) for (u64 b = blockIdx.x; b < (n); b += gridDim.x)

// A tree reduction over the block in shared memory; every thread gets the result.
template <typename A, typename F> __device__ A block_reduce(A v, A* sh, F f) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = f(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    A r = sh[0];
    __syncthreads();
    return r;
}

struct Add {
    template <typename A> __device__ A operator()(A a, A b) const { return a + b; }
};
struct Max {
    template <typename A> __device__ A operator()(A a, A b) const {
        return isnan(a) ? a : (isnan(b) ? b : (a > b ? a : b));
    }
};

// The range of row elements block `b` covers.
__device__ __forceinline__ void chunk_of(u64 b, u64 parts, u64 len, u64* row, u64* start, u64* end) {
    u64 chunk = (len + parts - 1) / parts;
    *row = b / parts;
    *start = (b % parts) * chunk;
    u64 e = *start + chunk;
    *end = e < len ? e : len;
}

// ---- sums ----------------------------------------------------------------------------------------
// f32 accumulates in f64 (as the CPU backend does), i64 in u64: unsigned overflow wraps (as the
// CPU's `wrapping_add`), where signed overflow would be undefined behaviour.

template <typename T> struct SumAcc { typedef double Acc; };
template <> struct SumAcc<i64> { typedef u64 Acc; };

// A row's mean from its sum: floats divide in f64; an i64 sum (kept in u64) divides as the signed
// integer it is, truncating toward zero, as the CPU backend does.
__device__ __forceinline__ double mean_of(double acc, u64 len) { return acc / (double)len; }
__device__ __forceinline__ u64 mean_of(u64 acc, u64 len) {
    return len == 0 ? 0 : (u64)((i64)acc / (i64)len);
}

template <typename T>
__device__ void sum_partials(u64 chunks, u64 len, u64 parts, int mean, const T* in,
                             typename SumAcc<T>::Acc* partial, T* out) {
    typedef typename SumAcc<T>::Acc A;
    __shared__ A sh[REDUCE_THREADS];
    BLOCK_STRIDE(b, chunks) {
        u64 row, start, end;
        chunk_of(b, parts, len, &row, &start, &end);
        // The chunk as a scalar head up to the first 16-byte boundary, 16-byte packs (one load
        // instruction each), and a scalar tail; four packs in flight per thread, each summed
        // into its own accumulator, so a thread's loads overlap.
        const T* c = in + row * len + start;
        const u64 n = end > start ? end - start : 0;
        const int N = Pack<T>::N;
        u64 head = ((16 - ((u64)c & 15)) & 15) / sizeof(T);
        head = head < n ? head : n;
        const u64 packs = (n - head) / N, step = blockDim.x;
        const Pack<T>* body = (const Pack<T>*)(c + head);
        A acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;
        u64 p = threadIdx.x;
        for (; p + 3 * step < packs; p += 4 * step) {
            const Pack<T> v0 = body[p], v1 = body[p + step], v2 = body[p + 2 * step],
                          v3 = body[p + 3 * step];
            for (int k = 0; k < N; ++k) {
                acc0 += (A)Math<T>::load(v0.v[k]);
                acc1 += (A)Math<T>::load(v1.v[k]);
                acc2 += (A)Math<T>::load(v2.v[k]);
                acc3 += (A)Math<T>::load(v3.v[k]);
            }
        }
        for (; p < packs; p += step) {
            const Pack<T> v = body[p];
            for (int k = 0; k < N; ++k) acc0 += (A)Math<T>::load(v.v[k]);
        }
        if (threadIdx.x < head) acc1 += (A)Math<T>::load(c[threadIdx.x]);
        for (u64 j = head + packs * N + threadIdx.x; j < n; j += step) acc2 += (A)Math<T>::load(c[j]);
        A acc = block_reduce((acc0 + acc1) + (acc2 + acc3), sh, Add());
        if (threadIdx.x == 0) {
            // A row in one chunk is done here: no second launch.
            if (parts == 1) out[row] = Math<T>::store((typename Math<T>::Acc)(mean ? mean_of(acc, len) : acc));
            else partial[b] = acc;
        }
    }
}

// A block per row combines the row's partials in a fixed tree (never one thread walking them).
template <typename T>
__device__ void sum_finish(u64 rows, u64 parts, int mean, u64 len,
                          const typename SumAcc<T>::Acc* partial, T* out) {
    typedef typename SumAcc<T>::Acc A;
    __shared__ A sh[REDUCE_THREADS];
    BLOCK_STRIDE(r, rows) {
        A acc = 0;
        for (u64 p = threadIdx.x; p < parts; p += blockDim.x) acc += partial[r * parts + p];
        acc = block_reduce(acc, sh, Add());
        if (threadIdx.x == 0) {
            if (mean) acc = mean_of(acc, len);
            out[r] = Math<T>::store((typename Math<T>::Acc)acc);
        }
    }
}

#define SUM(T, S)                                                                              \
    extern "C" __global__ void sum_partials_##S(u64 chunks, u64 len, u64 parts, int mean,      \
                                                const T* in, SumAcc<T>::Acc* partial, T* out) { \
        sum_partials<T>(chunks, len, parts, mean, in, partial, out);                           \
    }                                                                                          \
    extern "C" __global__ void sum_finish_##S(u64 rows, u64 parts, int mean, u64 len,          \
                                              const SumAcc<T>::Acc* partial, T* out) {         \
        sum_finish<T>(rows, parts, mean, len, partial, out);                                   \
    }
FOR_FLOAT_DTYPES(SUM)
SUM(i64, i64)

// Column sums (or means) of a contiguous `reduced × kept` matrix, the sum over a tensor's leading
// dims (a bias's gradient), with no transposed copy: a block is COL_TILE columns × COL_SLICES row
// slices (blockDim (32, 8)); neighbouring threads read neighbouring columns, each thread sums
// every COL_SLICES-th row of its share of its column, and the slices are added in a fixed tree.
// Long columns are split into `parts` chunks of rows (block b: tile b % tiles, chunk b / tiles)
// whose partial sums (`parts × kept`) `sum_cols_finish` adds in a fixed tree; with one part the
// first kernel writes the result.
#define COL_TILE 32
#define COL_SLICES 8

// Combines the COL_SLICES threads of each column of the block in a fixed tree with `f`; every
// thread of the column gets the result.
template <typename A, typename F> __device__ A column_slices_reduce(A acc, A (*sh)[COL_TILE], F f) {
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = COL_SLICES / 2; s > 0; s >>= 1) {
        if (threadIdx.y < s) sh[threadIdx.y][threadIdx.x] = f(sh[threadIdx.y][threadIdx.x], sh[threadIdx.y + s][threadIdx.x]);
        __syncthreads();
    }
    A total = sh[0][threadIdx.x];
    __syncthreads();  // the next tile reuses `sh`
    return total;
}

template <typename T>
__device__ void sum_cols(u64 reduced, u64 kept, u64 parts, int mean, const T* in,
                         typename SumAcc<T>::Acc* partial, T* out) {
    typedef typename SumAcc<T>::Acc A;
    __shared__ A sh[COL_SLICES][COL_TILE];
    u64 tiles = (kept + COL_TILE - 1) / COL_TILE;
    u64 chunk = (reduced + parts - 1) / parts;
    BLOCK_STRIDE(b, tiles * parts) {
        u64 col = (b % tiles) * COL_TILE + threadIdx.x, part = b / tiles;
        u64 start = part * chunk, end = start + chunk < reduced ? start + chunk : reduced;
        A acc = 0;
        if (col < kept)
            for (u64 r = start + threadIdx.y; r < end; r += COL_SLICES) acc += (A)Math<T>::load(in[r * kept + col]);
        A total = column_slices_reduce(acc, sh, Add());
        if (threadIdx.y == 0 && col < kept) {
            if (parts == 1) out[col] = Math<T>::store((typename Math<T>::Acc)(mean ? mean_of(total, reduced) : total));
            else partial[part * kept + col] = total;
        }
    }
}

template <typename T>
__device__ void sum_cols_finish(u64 reduced, u64 kept, u64 parts, int mean,
                                const typename SumAcc<T>::Acc* partial, T* out) {
    typedef typename SumAcc<T>::Acc A;
    __shared__ A sh[COL_SLICES][COL_TILE];
    u64 tiles = (kept + COL_TILE - 1) / COL_TILE;
    BLOCK_STRIDE(tile, tiles) {
        u64 col = tile * COL_TILE + threadIdx.x;
        A acc = 0;
        if (col < kept)
            for (u64 p = threadIdx.y; p < parts; p += COL_SLICES) acc += partial[p * kept + col];
        A total = column_slices_reduce(acc, sh, Add());
        if (threadIdx.y == 0 && col < kept)
            out[col] = Math<T>::store((typename Math<T>::Acc)(mean ? mean_of(total, reduced) : total));
    }
}

#define SUM_COLS(T, S)                                                                         \
    extern "C" __global__ void sum_cols_##S(u64 reduced, u64 kept, u64 parts, int mean,        \
                                            const T* in, SumAcc<T>::Acc* partial, T* out) {    \
        sum_cols<T>(reduced, kept, parts, mean, in, partial, out);                             \
    }                                                                                          \
    extern "C" __global__ void sum_cols_finish_##S(u64 reduced, u64 kept, u64 parts, int mean, \
                                                   const SumAcc<T>::Acc* partial, T* out) {    \
        sum_cols_finish<T>(reduced, kept, parts, mean, partial, out);                          \
    }
FOR_FLOAT_DTYPES(SUM_COLS)
SUM_COLS(i64, i64)

// ---- max / min with index ------------------------------------------------------------------------
// The first NaN wins (as in PyTorch); ties keep the first index. Index -1 marks "no element yet".

template <typename A> __device__ __forceinline__ bool is_nan(A x) { return x != x; }

template <typename A> struct Best {
    A v;
    i64 i;
};

template <typename A> struct PickBest {
    int greater;
    __device__ Best<A> operator()(Best<A> a, Best<A> b) const {
        if (a.i < 0) return b;
        if (b.i < 0) return a;
        bool an = is_nan(a.v), bn = is_nan(b.v);
        bool take_b;
        if (an || bn) take_b = (an && bn) ? b.i < a.i : bn;
        else if (a.v == b.v) take_b = b.i < a.i;
        else take_b = greater ? b.v > a.v : b.v < a.v;
        return take_b ? b : a;
    }
};

// Block `b`'s chunk of a row (or the whole row when `parts` is 1, written to `values`/`indices`
// at once), four candidates per thread so that its loads overlap; the order they are combined in
// does not matter, as `PickBest` is a total order (value, then first index).
template <typename T>
__device__ void extreme_partials(u64 chunks, u64 len, u64 parts, int greater, const T* in, T* pv,
                                 i64* pi, T* values, i64* indices) {
    typedef typename Math<T>::Acc A;
    __shared__ Best<A> sh[REDUCE_THREADS];
    PickBest<A> pick = {greater};
    BLOCK_STRIDE(b, chunks) {
        u64 row, start, end;
        chunk_of(b, parts, len, &row, &start, &end);
        const T* r = in + row * len;
        Best<A> b0 = {A(), -1}, b1 = b0, b2 = b0, b3 = b0;
        u64 step = blockDim.x, j = start + threadIdx.x;
        for (; j + 3 * step < end; j += 4 * step) {
            b0 = pick(b0, Best<A>{Math<T>::load(r[j]), (i64)j});
            b1 = pick(b1, Best<A>{Math<T>::load(r[j + step]), (i64)(j + step)});
            b2 = pick(b2, Best<A>{Math<T>::load(r[j + 2 * step]), (i64)(j + 2 * step)});
            b3 = pick(b3, Best<A>{Math<T>::load(r[j + 3 * step]), (i64)(j + 3 * step)});
        }
        for (; j < end; j += step) b0 = pick(b0, Best<A>{Math<T>::load(r[j]), (i64)j});
        Best<A> best = block_reduce(pick(pick(b0, b1), pick(b2, b3)), sh, pick);
        if (threadIdx.x == 0) {
            if (parts == 1) {
                values[row] = Math<T>::store(best.v);
                indices[row] = best.i;
            } else {
                pv[b] = Math<T>::store(best.v);
                pi[b] = best.i;
            }
        }
    }
}

// A block per row combines the row's partials (never one thread walking them).
template <typename T>
__device__ void extreme_finish(u64 rows, u64 parts, int greater, const T* pv, const i64* pi,
                               T* values, i64* indices) {
    typedef typename Math<T>::Acc A;
    __shared__ Best<A> sh[REDUCE_THREADS];
    PickBest<A> pick = {greater};
    BLOCK_STRIDE(r, rows) {
        Best<A> best = {A(), -1};
        for (u64 p = threadIdx.x; p < parts; p += blockDim.x)
            best = pick(best, Best<A>{Math<T>::load(pv[r * parts + p]), pi[r * parts + p]});
        best = block_reduce(best, sh, pick);
        if (threadIdx.x == 0) {
            values[r] = Math<T>::store(best.v);
            indices[r] = best.i;
        }
    }
}

// Max (or min) down each column of a contiguous `reduced × kept` matrix and the row it is in:
// the extreme over a tensor's leading dims with no transposed copy, tiled as `sum_cols` is.
// With `parts` > 1, chunks of rows write partials (`parts × kept`) that `extreme_cols_finish`
// combines.
template <typename T>
__device__ void extreme_cols(u64 reduced, u64 kept, u64 parts, int greater, const T* in, T* pv,
                             i64* pi, T* values, i64* indices) {
    typedef typename Math<T>::Acc A;
    __shared__ Best<A> sh[COL_SLICES][COL_TILE];
    PickBest<A> pick = {greater};
    u64 tiles = (kept + COL_TILE - 1) / COL_TILE;
    u64 chunk = (reduced + parts - 1) / parts;
    BLOCK_STRIDE(b, tiles * parts) {
        u64 col = (b % tiles) * COL_TILE + threadIdx.x, part = b / tiles;
        u64 start = part * chunk, end = start + chunk < reduced ? start + chunk : reduced;
        Best<A> best = {A(), -1};
        if (col < kept)
            for (u64 r = start + threadIdx.y; r < end; r += COL_SLICES)
                best = pick(best, Best<A>{Math<T>::load(in[r * kept + col]), (i64)r});
        best = column_slices_reduce(best, sh, pick);
        if (threadIdx.y == 0 && col < kept) {
            if (parts == 1) {
                values[col] = Math<T>::store(best.v);
                indices[col] = best.i;
            } else {
                pv[part * kept + col] = Math<T>::store(best.v);
                pi[part * kept + col] = best.i;
            }
        }
    }
}

template <typename T>
__device__ void extreme_cols_finish(u64 kept, u64 parts, int greater, const T* pv, const i64* pi,
                                    T* values, i64* indices) {
    typedef typename Math<T>::Acc A;
    __shared__ Best<A> sh[COL_SLICES][COL_TILE];
    PickBest<A> pick = {greater};
    u64 tiles = (kept + COL_TILE - 1) / COL_TILE;
    BLOCK_STRIDE(tile, tiles) {
        u64 col = tile * COL_TILE + threadIdx.x;
        Best<A> best = {A(), -1};
        if (col < kept)
            for (u64 p = threadIdx.y; p < parts; p += COL_SLICES)
                best = pick(best, Best<A>{Math<T>::load(pv[p * kept + col]), pi[p * kept + col]});
        best = column_slices_reduce(best, sh, pick);
        if (threadIdx.y == 0 && col < kept) {
            values[col] = Math<T>::store(best.v);
            indices[col] = best.i;
        }
    }
}

#define EXTREME(T, S)                                                                          \
    extern "C" __global__ void extreme_partials_##S(u64 chunks, u64 len, u64 parts,            \
                                                    int greater, const T* in, T* pv, i64* pi,  \
                                                    T* values, i64* indices) {                 \
        extreme_partials<T>(chunks, len, parts, greater, in, pv, pi, values, indices);         \
    }                                                                                          \
    extern "C" __global__ void extreme_finish_##S(u64 rows, u64 parts, int greater,            \
                                                  const T* pv, const i64* pi, T* values,       \
                                                  i64* indices) {                              \
        extreme_finish<T>(rows, parts, greater, pv, pi, values, indices);                      \
    }                                                                                          \
    extern "C" __global__ void extreme_cols_##S(u64 reduced, u64 kept, u64 parts, int greater, \
                                                const T* in, T* pv, i64* pi, T* values,        \
                                                i64* indices) {                                \
        extreme_cols<T>(reduced, kept, parts, greater, in, pv, pi, values, indices);           \
    }                                                                                          \
    extern "C" __global__ void extreme_cols_finish_##S(u64 kept, u64 parts, int greater,       \
                                                       const T* pv, const i64* pi, T* values,  \
                                                       i64* indices) {                         \
        extreme_cols_finish<T>(kept, parts, greater, pv, pi, values, indices);                 \
    }
FOR_ALL_DTYPES(EXTREME)

// ---- softmax -------------------------------------------------------------------------------------
// Stable around the row's max; the sum of exponentials accumulates in f64. A row short enough for
// one block's share of the work runs in `softmax_rows`, a block per row. A longer row is split into
// `parts` chunks: `softmax_partials` finds each chunk's max and its sum of exponentials around
// that max; `softmax_write` combines its row's partials in a fixed order (the sums rescaled to the
// row's max) and writes the chunk. A chunk of nothing but -inf (its sum NaN, as -inf - -inf is)
// adds nothing, as its elements add nothing to the unsplit row's sum.

// Writes elements [start, end) of a row whose max is `m` and whose sum of exponentials around it is
// `s`.
template <typename T, typename A>
__device__ void softmax_write_range(const T* r, T* o, u64 start, u64 end, int log_, A m, double s) {
    if (log_) {
        A ls = (A)log(s);
        for (u64 j = start + threadIdx.x; j < end; j += blockDim.x) o[j] = Math<T>::store(Math<T>::load(r[j]) - m - ls);
    } else {
        A inv = (A)(1.0 / s);
        for (u64 j = start + threadIdx.x; j < end; j += blockDim.x) o[j] = Math<T>::store(exp(Math<T>::load(r[j]) - m) * inv);
    }
}

template <typename T> __device__ void softmax_rows(u64 rows, u64 len, int log_, const T* in, T* out) {
    typedef typename Math<T>::Acc A;
    __shared__ A shm[REDUCE_THREADS];
    __shared__ double shs[REDUCE_THREADS];
    BLOCK_STRIDE(row, rows) {
        const T* r = in + row * len;
        A m = -PL_INFINITY;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) m = Max()(m, Math<T>::load(r[j]));
        m = block_reduce(m, shm, Max());
        double s = 0.0;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) s += (double)exp(Math<T>::load(r[j]) - m);
        s = block_reduce(s, shs, Add());
        softmax_write_range(r, out + row * len, 0, len, log_, m, s);
    }
}

template <typename T>
__device__ void softmax_partials(u64 chunks, u64 len, u64 parts, const T* in, double* maxima,
                                 double* sums) {
    typedef typename Math<T>::Acc A;
    __shared__ A shm[REDUCE_THREADS];
    __shared__ double shs[REDUCE_THREADS];
    BLOCK_STRIDE(b, chunks) {
        u64 row, start, end;
        chunk_of(b, parts, len, &row, &start, &end);
        const T* r = in + row * len;
        A m = -PL_INFINITY;
        for (u64 j = start + threadIdx.x; j < end; j += blockDim.x) m = Max()(m, Math<T>::load(r[j]));
        m = block_reduce(m, shm, Max());
        double s = 0.0;
        for (u64 j = start + threadIdx.x; j < end; j += blockDim.x) s += (double)exp(Math<T>::load(r[j]) - m);
        s = block_reduce(s, shs, Add());
        if (threadIdx.x == 0) {
            maxima[b] = (double)m;
            sums[b] = s;
        }
    }
}

template <typename T>
__device__ void softmax_write(u64 chunks, u64 len, u64 parts, int log_, const T* in,
                              const double* maxima, const double* sums, T* out) {
    typedef typename Math<T>::Acc A;
    __shared__ double row_max, row_sum;
    BLOCK_STRIDE(b, chunks) {
        u64 row, start, end;
        chunk_of(b, parts, len, &row, &start, &end);
        if (threadIdx.x == 0) {
            const double* pm = maxima + row * parts;
            const double* ps = sums + row * parts;
            double m = -PL_INFINITY, s = 0.0;
            for (u64 p = 0; p < parts; ++p) m = Max()(m, pm[p]);
            for (u64 p = 0; p < parts; ++p)
                if (pm[p] != -PL_INFINITY) s += ps[p] * exp(pm[p] - m);
            row_max = m;
            row_sum = s;
        }
        __syncthreads();
        A m = (A)row_max;
        double s = row_sum;
        __syncthreads();  // every thread has read them before the next chunk's are written
        softmax_write_range(in + row * len, out + row * len, start, end, log_, m, s);
    }
}

#define SOFTMAX(T, S)                                                                          \
    extern "C" __global__ void softmax_rows_##S(u64 rows, u64 len, int log_, const T* in,      \
                                                T* out) {                                      \
        softmax_rows<T>(rows, len, log_, in, out);                                             \
    }                                                                                          \
    extern "C" __global__ void softmax_partials_##S(u64 chunks, u64 len, u64 parts,            \
                                                    const T* in, double* maxima,               \
                                                    double* sums) {                            \
        softmax_partials<T>(chunks, len, parts, in, maxima, sums);                             \
    }                                                                                          \
    extern "C" __global__ void softmax_write_##S(u64 chunks, u64 len, u64 parts, int log_,     \
                                                 const T* in, const double* maxima,            \
                                                 const double* sums, T* out) {                 \
        softmax_write<T>(chunks, len, parts, log_, in, maxima, sums, out);                     \
    }
FOR_FLOAT_DTYPES(SOFTMAX)

// The gradient of softmax (or log-softmax) rows from the output `out` and the incoming gradient
// `grad`, a block per row (PyTorch's `_log_softmax_backward_data`): log-softmax g − exp(y)·Σg,
// softmax y·(g − Σ g·y), the sum in f64.
template <typename T>
__device__ void softmax_backward_rows(u64 rows, u64 len, int log_, const T* grad, const T* out,
                                      T* gx) {
    typedef typename Math<T>::Acc A;
    __shared__ double sh[REDUCE_THREADS];
    BLOCK_STRIDE(row, rows) {
        const T* g = grad + row * len;
        const T* y = out + row * len;
        T* r = gx + row * len;
        double s = 0.0;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) {
            double gj = (double)Math<T>::load(g[j]);
            s += log_ ? gj : gj * (double)Math<T>::load(y[j]);
        }
        A total = (A)block_reduce(s, sh, Add());
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) {
            A gj = Math<T>::load(g[j]), yj = Math<T>::load(y[j]);
            r[j] = Math<T>::store(log_ ? gj - exp(yj) * total : yj * (gj - total));
        }
    }
}

#define SOFTMAX_BACKWARD(T, S)                                                                 \
    extern "C" __global__ void softmax_backward_rows_##S(u64 rows, u64 len, int log_,          \
                                                         const T* grad, const T* out, T* gx) { \
        softmax_backward_rows<T>(rows, len, log_, grad, out, gx);                              \
    }
FOR_FLOAT_DTYPES(SOFTMAX_BACKWARD)

// Layer normalization, a block per row of `len` (PyTorch's `native_layer_norm`): the row's mean
// and biased variance in f64, `out = (x − mean)·rstd·weight + bias` with `rstd = 1/√(var + eps)`
// (weight and bias optional: null), and each row's mean and rstd kept for the backward pass.
// Halves run in f32 (the tensor layer casts them), as `engine/src/backend/cpu/norm.rs`.
template <typename T>
__device__ void layer_norm_rows(u64 rows, u64 len, double eps, const T* input, const T* weight,
                                const T* bias, T* out, T* mean, T* rstd) {
    __shared__ double sh[REDUCE_THREADS];
    BLOCK_STRIDE(row, rows) {
        const T* x = input + row * len;
        T* y = out + row * len;
        double s = 0.0;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) s += (double)x[j];
        const double m = block_reduce(s, sh, Add()) / (double)len;
        double q = 0.0;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) {
            const double d = (double)x[j] - m;
            q += d * d;
        }
        const double var = block_reduce(q, sh, Add()) / (double)len;
        const T mt = (T)m, rt = (T)(1.0 / sqrt(var + eps));
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) {
            T v = (x[j] - mt) * rt;
            if (weight) v = v * weight[j];
            if (bias) v = v + bias[j];
            y[j] = v;
        }
        if (threadIdx.x == 0) {
            mean[row] = mt;
            rstd[row] = rt;
        }
    }
}

// The input's gradient of `layer_norm_rows`: with x̂ = (x − mean)·rstd and g = grad·weight,
// gx = rstd·(g − mean(g) − x̂·mean(g·x̂)), the row sums in f64.
template <typename T>
__device__ void layer_norm_backward_rows(u64 rows, u64 len, const T* input, const T* mean,
                                         const T* rstd, const T* weight, const T* grad, T* gx) {
    __shared__ double sh[REDUCE_THREADS];
    BLOCK_STRIDE(row, rows) {
        const T* x = input + row * len;
        const T* g = grad + row * len;
        T* r = gx + row * len;
        const double m = (double)mean[row], rs = (double)rstd[row];
        double s = 0.0, d = 0.0;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) {
            const double gj = (double)g[j] * (weight ? (double)weight[j] : 1.0);
            s += gj;
            d += gj * ((double)x[j] - m) * rs;
        }
        const double sum = block_reduce(s, sh, Add()), dot = block_reduce(d, sh, Add());
        const double n = (double)len;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) {
            const double gj = (double)g[j] * (weight ? (double)weight[j] : 1.0);
            const double xhat = ((double)x[j] - m) * rs;
            r[j] = (T)(rs * (gj - sum / n - xhat * dot / n));
        }
    }
}

#define LAYER_NORM(T, S)                                                                       \
    extern "C" __global__ void layer_norm_rows_##S(u64 rows, u64 len, u64 eps, const T* input, \
                                                   const T* weight, const T* bias, T* out,     \
                                                   T* mean, T* rstd) {                         \
        layer_norm_rows<T>(rows, len, from_bits<double>(eps), input, weight, bias, out, mean,  \
                           rstd);                                                              \
    }                                                                                          \
    extern "C" __global__ void layer_norm_backward_rows_##S(                                   \
        u64 rows, u64 len, const T* input, const T* mean, const T* rstd, const T* weight,      \
        const T* grad, T* gx) {                                                                \
        layer_norm_backward_rows<T>(rows, len, input, mean, rstd, weight, grad, gx);           \
    }
LAYER_NORM(float, f32)
LAYER_NORM(double, f64)
