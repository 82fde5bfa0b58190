// The optimizers' updates, in place, for a list of tensors in one launch (PyTorch's
// `multi_tensor_apply` behind `_foreach_*`): the host packs up to LIST_MAX tensors of one dtype
// into a `TensorList` passed by value, and every thread walks each tensor with a grid stride, so
// a step over a model's parameters is one launch, whatever their number and sizes.
//
// Each element is computed in the dtype's accumulator type (f32 for f16/bf16, as PyTorch's
// opmath) in the order the out-of-place ops would run, every product and sum rounded to it: on
// f32 and f64 a fused step gives the unfused ops' bits (the host build compiles without FMA
// contraction; a GPU may contract and differ in the last bit).

#define LIST_MAX 24

// As `TensorList` in `engine/src/backend/gpu/optim.rs`. `ptr[0]` the parameters, `ptr[1]` their gradients,
// `ptr[2]`/`ptr[3]` the optimizer's state (momentum; Adam's two moments), 0 where unused.
// Bit `t` of `first` is set when tensor `t`'s state is new this step (uninitialised memory).
struct TensorList {
    u64 count;
    u64 first;
    u64 numel[LIST_MAX];
    u64 ptr[4][LIST_MAX];
};

__device__ __forceinline__ double f64_bits(u64 bits) { return from_bits<double>(bits); }

// SGD as `torch.optim.SGD`: d = g + wd·p; with momentum, b = d at the first step and
// momentum·b + (1 − dampening)·d after, then d = b (or d + momentum·b, Nesterov); p += −lr·d.
template <typename T>
__device__ void sgd_step(const TensorList& l, double lr, double momentum, double dampening,
                         double wd, int nesterov) {
    typedef typename Math<T>::Acc A;
    const A a_wd = (A)wd, a_m = (A)momentum, a_keep = (A)(1.0 - dampening), a_lr = (A)(-lr);
    for (u64 t = 0; t < l.count; ++t) {
        T* p = (T*)l.ptr[0][t];
        const T* g = (const T*)l.ptr[1][t];
        T* buf = (T*)l.ptr[2][t];
        const bool first = (l.first >> t) & 1;
        GRID_STRIDE(i, l.numel[t]) {
            A w = Math<T>::load(p[i]);
            A d = Math<T>::load(g[i]);
            if (wd != 0.0) d = d + w * a_wd;
            if (momentum != 0.0) {
                A b = first ? d : Math<T>::load(buf[i]) * a_m + d * a_keep;
                buf[i] = Math<T>::store(b);
                d = nesterov ? d + b * a_m : b;
            }
            p[i] = Math<T>::store(w + d * a_lr);
        }
    }
}

// Adam (AdamW when `decoupled`) as placelab's unfused ops compute it: m = b1·m + (1 − b1)·g,
// v = b2·v + ((g·g)·(1 − b2)), p = w − ((m / c1) / (√(v / c2) + eps))·lr, where w = p·(1 − lr·wd)
// for AdamW and g = g + wd·p for Adam's L2 decay. `c1`, `c2` are the bias corrections.
template <typename T>
__device__ void adam_step(const TensorList& l, double lr, double b1, double b2, double eps,
                          double wd, int decoupled, double c1, double c2) {
    typedef typename Math<T>::Acc A;
    const A a_b1 = (A)b1, a_1b1 = (A)(1.0 - b1), a_b2 = (A)b2, a_1b2 = (A)(1.0 - b2);
    const A a_eps = (A)eps, a_lr = (A)lr, a_c1 = (A)c1, a_c2 = (A)c2;
    const A a_wd = (A)wd, a_shrink = (A)(1.0 - lr * wd);
    for (u64 t = 0; t < l.count; ++t) {
        T* p = (T*)l.ptr[0][t];
        const T* gp = (const T*)l.ptr[1][t];
        T* mp = (T*)l.ptr[2][t];
        T* vp = (T*)l.ptr[3][t];
        const bool first = (l.first >> t) & 1;
        GRID_STRIDE(i, l.numel[t]) {
            A w = Math<T>::load(p[i]);
            A g = Math<T>::load(gp[i]);
            A keep = w;
            if (wd != 0.0) {
                if (decoupled) keep = w * a_shrink;
                else g = g + w * a_wd;
            }
            A m = first ? (A)0 : Math<T>::load(mp[i]);
            A v = first ? (A)0 : Math<T>::load(vp[i]);
            m = m * a_b1 + g * a_1b1;
            v = v * a_b2 + (g * g) * a_1b2;
            mp[i] = Math<T>::store(m);
            vp[i] = Math<T>::store(v);
            A denom = (A)sqrt(v / a_c2) + a_eps;
            p[i] = Math<T>::store(keep - ((m / a_c1) / denom) * a_lr);
        }
    }
}

#define OPTIM(T, S)                                                                            \
    extern "C" __global__ void sgd_step_##S(TensorList list, u64 lr, u64 momentum,             \
                                            u64 dampening, u64 wd, int nesterov) {             \
        sgd_step<T>(list, f64_bits(lr), f64_bits(momentum), f64_bits(dampening), f64_bits(wd), \
                    nesterov);                                                                 \
    }                                                                                          \
    extern "C" __global__ void adam_step_##S(TensorList list, u64 lr, u64 b1, u64 b2, u64 eps, \
                                             u64 wd, int decoupled, u64 c1, u64 c2) {          \
        adam_step<T>(list, f64_bits(lr), f64_bits(b1), f64_bits(b2), f64_bits(eps),            \
                     f64_bits(wd), decoupled, f64_bits(c1), f64_bits(c2));                     \
    }
FOR_FLOAT_DTYPES(OPTIM)
