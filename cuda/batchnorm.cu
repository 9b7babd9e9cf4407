// Batch normalisation over a contiguous (N, C, D) buffer, D the product of the spatial dims:
// element (n, c, d) sits at (n * C + c) * D + d.  ext/batchnorm.pyx's formulas, in acc_t<T>.
//
// Per-channel reductions run in two stages: `splits` blocks per channel (blockIdx.x =
// c * splits + s) each reduce a share of the channel's N * D elements into a partial, then one
// thread per channel merges its partials and writes the per-channel results and the
// coefficients of the elementwise pass.
//
// Statistics are taken of x - K, K the channel's first element: each thread sums its shifted
// elements and their squares, turns them into (count, mean, M2) and the partials are merged
// with Chan's formula, so neither a sum of squares nor a difference of partial means of
// unshifted values ever cancels.  Variance is the biased one.
//
// The data (x, y, dy, dx) are of element type T; the per-channel values (scale, bias, the
// statistics, dscale, dbias) of P: T itself, or float whatever T is (ONNX's T1 and T2: mixed
// precision runs BatchNorm on 16-bit data with float32 parameters and statistics).  The kernels
// with P = T are <name>_<suffix>, those with P = float <name>_float_params_<suffix>.
#include "common.cuh"

// The thread's share of channel c: elements j = first, first + step, ... < N * D of the channel,
// walked as (n, d) without a division per element.
struct ChannelWalk {
    int64_t n, d, step_n, step_d, N, D;
    __device__ ChannelWalk(int64_t first, int64_t step, int64_t N_, int64_t D_) : N(N_), D(D_) {
        n = first / D;
        d = first - n * D;
        step_n = step / D;
        step_d = step - step_n * D;
    }
    __device__ bool more() const { return n < N; }
    __device__ int64_t at(int64_t C, int64_t c) const { return (n * C + c) * D + d; }
    __device__ void next() {
        n += step_n;
        d += step_d;
        if (d >= D) {
            d -= D;
            ++n;
        }
    }
};

template <typename A> struct Moments {
    A count, mean, m2;
};

// Chan et al.: the moments of the union of two disjoint sets.
template <typename A> __device__ __forceinline__ Moments<A> merge(Moments<A> a, Moments<A> b) {
    const A count = a.count + b.count;
    if (count == A(0)) return a;
    const A delta = b.mean - a.mean, fb = b.count / count;
    return {count, a.mean + delta * fb, a.m2 + b.m2 + delta * delta * a.count * fb};
}

template <typename A> __device__ __forceinline__ Moments<A> shuffle(Moments<A> m, int k) {
    return {__shfl_xor_sync(0xffffffffu, m.count, k), __shfl_xor_sync(0xffffffffu, m.mean, k),
            __shfl_xor_sync(0xffffffffu, m.m2, k)};
}

// Reduce v over the block (blockDim.x a multiple of 32, at most 1024); the result in thread 0.
template <typename V, typename Shuffle, typename Merge>
__device__ V block_reduce(V v, Shuffle shfl, Merge combine) {
    __shared__ V partial[32];
    for (int k = 16; k > 0; k >>= 1) v = combine(v, shfl(v, k));
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int w = 1; w < (int)blockDim.x / 32; ++w) v = combine(v, partial[w]);
    return v;
}

// part[(c * splits + s) * 3 + {0, 1, 2}] = (count, mean, M2) of block (c, s)'s share of x - K.
template <typename T>
__device__ void bn_partial_stats_impl(const T* x, acc_t<T>* part, int64_t N, int64_t C, int64_t D, int splits) {
    typedef acc_t<T> A;
    const int64_t c = blockIdx.x / splits, s = blockIdx.x % splits;
    ChannelWalk w(s * blockDim.x + threadIdx.x, (int64_t)splits * blockDim.x, N, D);
    const A shift = to_acc(x[c * D]);
    A s1 = 0, s2 = 0, count = 0;
    for (; w.more(); w.next()) {
        const A v = to_acc(x[w.at(C, c)]) - shift;
        s1 += v;
        s2 += v * v;
        count += A(1);
    }
    Moments<A> m = {count, A(0), A(0)};
    if (count > A(0)) {
        const A mean = s1 / count;
        m = {count, mean, fmax(s2 - s1 * mean, A(0))};
    }
    m = block_reduce(m, [](Moments<A> v, int k) { return shuffle(v, k); },
                     [](Moments<A> a, Moments<A> b) { return merge(a, b); });
    if (threadIdx.x == 0) {
        A* out = part + (c * splits + s) * 3;
        out[0] = m.count;
        out[1] = m.mean;
        out[2] = m.m2;
    }
}

// Per channel: mean and biased variance (in training from the partials and x's shift
// K = x[c * D], otherwise input_mean and input_var), saved_mean, saved_inv_std, running stats
// (training; pointers may be null) and coef[2c..2c+1] = (scale * inv_std,
// B - mean * scale * inv_std).
template <typename T, typename P>
__device__ void bn_finalize_impl(const acc_t<T>* part, const T* x, const P* scale, const P* bias,
                                 const P* input_mean, const P* input_var, P* saved_mean, P* saved_inv_std,
                                 P* running_mean, P* running_var, acc_t<T>* coef, int64_t D, int64_t C,
                                 acc_t<T> epsilon, acc_t<T> momentum, int splits) {
    typedef acc_t<T> A;
    GRID_STRIDE_LOOP(c, C) {
        A mean, var;
        if (part != nullptr) {
            Moments<A> m = {part[c * splits * 3], part[c * splits * 3 + 1], part[c * splits * 3 + 2]};
            for (int s = 1; s < splits; ++s) {
                const A* p = part + (c * splits + s) * 3;
                m = merge(m, Moments<A>{p[0], p[1], p[2]});
            }
            mean = to_acc(x[c * D]) + m.mean;
            var = m.m2 / m.count;
        } else {
            mean = to_acc(input_mean[c]);
            var = to_acc(input_var[c]);
        }
        const A inv_std = A(1) / sqrt(var + epsilon), mul = to_acc(scale[c]) * inv_std;
        coef[2 * c] = mul;
        coef[2 * c + 1] = to_acc(bias[c]) - mean * mul;
        if (saved_mean != nullptr) saved_mean[c] = from_acc<P>(mean);
        if (saved_inv_std != nullptr) saved_inv_std[c] = from_acc<P>(inv_std);
        if (running_mean != nullptr)
            running_mean[c] = from_acc<P>(momentum * to_acc(input_mean[c]) + (A(1) - momentum) * mean);
        if (running_var != nullptr)
            running_var[c] = from_acc<P>(momentum * to_acc(input_var[c]) + (A(1) - momentum) * var);
    }
}

// c = (i / D) % C, with 32-bit division whenever the index allows it.
__device__ __forceinline__ int64_t channel_of(int64_t i, int64_t C, int64_t D) {
    if (i <= INT32_MAX && D <= INT32_MAX) return ((unsigned)i / (unsigned)D) % (unsigned)C;
    return (i / D) % C;
}

template <typename T>
__device__ void bn_normalize_impl(const T* x, T* y, const acc_t<T>* coef, int64_t total, int64_t C, int64_t D) {
    GRID_STRIDE_LOOP(i, total) {
        const int64_t c = channel_of(i, C, D);
        y[i] = from_acc<T>(to_acc(x[i]) * coef[2 * c] + coef[2 * c + 1]);
    }
}

template <typename A> struct GradSums {
    A dy, dy_x;
};

// part[(c * splits + s) * 2 + {0, 1}] = block (c, s)'s sums of dy and dy * (x - mean).
template <typename T, typename P>
__device__ void bn_partial_grad_impl(const T* dy, const T* x, const P* mean, acc_t<T>* part, int64_t N,
                                     int64_t C, int64_t D, int splits) {
    typedef acc_t<T> A;
    const int64_t c = blockIdx.x / splits, s = blockIdx.x % splits;
    const A m = to_acc(mean[c]);
    GradSums<A> sums = {A(0), A(0)};
    for (ChannelWalk w(s * blockDim.x + threadIdx.x, (int64_t)splits * blockDim.x, N, D); w.more(); w.next()) {
        const int64_t k = w.at(C, c);
        const A g = to_acc(dy[k]);
        sums.dy += g;
        sums.dy_x += g * (to_acc(x[k]) - m);
    }
    sums = block_reduce(sums,
                        [](GradSums<A> v, int k) {
                            return GradSums<A>{__shfl_xor_sync(0xffffffffu, v.dy, k),
                                               __shfl_xor_sync(0xffffffffu, v.dy_x, k)};
                        },
                        [](GradSums<A> a, GradSums<A> b) { return GradSums<A>{a.dy + b.dy, a.dy_x + b.dy_x}; });
    if (threadIdx.x == 0) {
        part[(c * splits + s) * 2] = sums.dy;
        part[(c * splits + s) * 2 + 1] = sums.dy_x;
    }
}

// Per channel: dbias = sum dy, dscale = sum dy (x - mean) * inv_std (pointers may be null;
// part is null when no sums were taken) and coef[3c..3c+2] = (k_dy, k_x, k_0) of
// dx = k_dy dy + k_x (x - mean) + k_0, the batch-statistics terms only in training.
template <typename T, typename P>
__device__ void bn_finalize_grad_impl(const acc_t<T>* part, const P* scale, const P* inv_std, P* dscale,
                                      P* dbias, acc_t<T>* coef, int64_t C, acc_t<T> count, int splits,
                                      int training) {
    typedef acc_t<T> A;
    GRID_STRIDE_LOOP(c, C) {
        A sb = 0, sx = 0;
        if (part != nullptr)
            for (int s = 0; s < splits; ++s) {
                sb += part[(c * splits + s) * 2];
                sx += part[(c * splits + s) * 2 + 1];
            }
        const A is = to_acc(inv_std[c]), ds = sx * is;
        if (dbias != nullptr) dbias[c] = from_acc<P>(sb);
        if (dscale != nullptr) dscale[c] = from_acc<P>(ds);
        if (coef != nullptr) {
            const A k_dy = to_acc(scale[c]) * is;
            coef[3 * c] = k_dy;
            coef[3 * c + 1] = training ? -k_dy * is * ds / count : A(0);
            coef[3 * c + 2] = training ? -k_dy * sb / count : A(0);
        }
    }
}

template <typename T, typename P>
__device__ void bn_grad_input_impl(const T* dy, const T* x, const P* mean, const acc_t<T>* coef, T* dx,
                                   int64_t total, int64_t C, int64_t D) {
    GRID_STRIDE_LOOP(i, total) {
        const int64_t c = channel_of(i, C, D);
        dx[i] = from_acc<T>(coef[3 * c] * to_acc(dy[i]) + coef[3 * c + 1] * (to_acc(x[i]) - to_acc(mean[c])) +
                            coef[3 * c + 2]);
    }
}

// The kernels reading or writing per-channel values, for data T and per-channel type P, named
// bn_<kernel><S>.
#define BATCHNORM_CHANNELS(T, P, S)                                                                            \
    extern "C" __global__ void bn_finalize##S(const acc_t<T>* part, const T* x, const P* scale, const P* bias,  \
                                              const P* input_mean, const P* input_var, P* saved_mean,           \
                                              P* saved_inv_std, P* running_mean, P* running_var,                \
                                              acc_t<T>* coef, int64_t D, int64_t C, acc_t<T> epsilon,           \
                                              acc_t<T> momentum, int splits) {                                  \
        bn_finalize_impl<T, P>(part, x, scale, bias, input_mean, input_var, saved_mean, saved_inv_std,         \
                               running_mean, running_var, coef, D, C, epsilon, momentum, splits);              \
    }                                                                                                          \
    extern "C" __global__ void bn_partial_grad##S(const T* dy, const T* x, const P* mean, acc_t<T>* part,       \
                                                  int64_t N, int64_t C, int64_t D, int splits) {               \
        bn_partial_grad_impl<T, P>(dy, x, mean, part, N, C, D, splits);                                        \
    }                                                                                                          \
    extern "C" __global__ void bn_finalize_grad##S(const acc_t<T>* part, const P* scale, const P* inv_std,      \
                                                   P* dscale, P* dbias, acc_t<T>* coef, int64_t C,              \
                                                   acc_t<T> count, int splits, int training) {                  \
        bn_finalize_grad_impl<T, P>(part, scale, inv_std, dscale, dbias, coef, C, count, splits, training);    \
    }                                                                                                          \
    extern "C" __global__ void bn_grad_input##S(const T* dy, const T* x, const P* mean, const acc_t<T>* coef,   \
                                                T* dx, int64_t total, int64_t C, int64_t D) {                  \
        bn_grad_input_impl<T, P>(dy, x, mean, coef, dx, total, C, D);                                         \
    }

#define BATCHNORM(T, S)                                                                                        \
    extern "C" __global__ void bn_partial_stats_##S(const T* x, acc_t<T>* part, int64_t N, int64_t C, int64_t D, \
                                                    int splits) {                                              \
        bn_partial_stats_impl<T>(x, part, N, C, D, splits);                                                    \
    }                                                                                                          \
    extern "C" __global__ void bn_normalize_##S(const T* x, T* y, const acc_t<T>* coef, int64_t total,          \
                                                int64_t C, int64_t D) {                                        \
        bn_normalize_impl<T>(x, y, coef, total, C, D);                                                         \
    }                                                                                                          \
    BATCHNORM_CHANNELS(T, T, _##S)                                                                             \
    BATCHNORM_CHANNELS(T, float, _float_params_##S)
MT_FOR_FLOATS(BATCHNORM)
