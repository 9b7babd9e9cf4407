// Kernels of the fused ops (minitrain/ops/fused.py), each one launch where the unfused plan
// has two or three:
//   bias_activation       y = act(y + beta * bias[b(i)]) in place (act's parameters alpha and
//                         alpha2: Clip's bounds): the epilogue of FusedGemm
//                         (after a cuBLAS product) and of FusedConv (after the convolution)
//   activation_grad_bias  dx = act'(dy, v) and db[c] = sum of dx over every axis but 1, the
//                         channel's elements split over several blocks
//   max_pool_activation_grad_bias
//                         the same, dy being MaxPoolGrad's dX for windows that tile the plane,
//                         found from the MaxPool's input and dY rather than read
//   global_average_pool_activation_grad_bias
//                         the same, dy being a global average pool's gradient: one value per
//                         plane, spread over it in registers rather than read from memory
//   batch_norm_fold       an inference BatchNormalization folded into the Conv's weight and
//                         bias, in double as the CPU's kernel
//   sce_with_grad         SoftmaxCrossEntropyLoss and its gradient in one pass over each row:
//                         the row's loss (reduced by loss.cu's sce_reduce) and d_logits, with
//                         loss.cu's formulas, so the float32/float64 bits are the unfused ones
// activation_grad_bias and the two after it move 16-byte packs where a plane's length allows,
// a few packs in flight per thread.
// The activation is a run-time code (activation.cuh's activate): 0 Relu, 1 Sigmoid, 2 Tanh,
// 3 LeakyRelu (alpha), 4 Clip (forward only: bounds alpha and beta), 5 HardSwish (gradient only).
#include "common.cuh"
#include "activation.cuh"
#include "block_sum.cuh"
#include "cross_entropy_rows.cuh"
#include "hard_swish.cuh"
#include "lanes.cuh"
#include "pool_window.cuh"

template <typename A> __device__ __forceinline__ A activation_grad(int code, A dy, A v, A alpha) {
    switch (code) {
        case 0: return ReluGrad<A>{alpha}(dy, v);
        case 1: return SigmoidGrad<A>{alpha}(dy, v);
        case 2: return TanhGrad<A>{alpha}(dy, v);
        case 3: return LeakyReluGrad<A>{alpha}(dy, v);
        default: return HardSwishGrad<A>{alpha}(dy, v);
    }
}

// The bias element of y's element i: ((i / outer_div) % outer_mod) * outer_stride +
// (i % inner_mod) * inner_stride (a Gemm's C broadcast to (m, n), or a Conv's bias[channel]).
template <typename T>
__device__ void bias_activation_impl(T* y, const T* bias, int64_t n, int64_t outer_div, int64_t outer_mod,
                                     int64_t outer_stride, int64_t inner_mod, int64_t inner_stride, acc_t<T> beta,
                                     int code, acc_t<T> alpha, acc_t<T> alpha2) {
    const bool narrow = n <= INT32_MAX;     // every index and divisor fits 32 bits: cheaper division
    GRID_STRIDE_LOOP(i, n) {
        acc_t<T> v = to_acc<T>(y[i]);
        if (bias) {
            int64_t b;
            if (narrow) {
                const unsigned u = (unsigned)i;
                b = (u / (unsigned)outer_div % (unsigned)outer_mod) * outer_stride + u % (unsigned)inner_mod * inner_stride;
            } else {
                b = ((i / outer_div) % outer_mod) * outer_stride + (i % inner_mod) * inner_stride;
            }
            v += beta * to_acc<T>(bias[b]);
        }
        y[i] = from_acc<T>(activate(code, v, alpha, alpha2));
    }
}

// scale[c] / sqrt(var[c] + epsilon): the factor of output channel c.
template <typename T>
__device__ __forceinline__ double fold_factor(const T* scale, const T* var, int64_t c, double epsilon) {
    return (double)to_acc<T>(scale[c]) * (1.0 / sqrt((double)to_acc<T>(var[c]) + epsilon));
}

// w_folded[i] = w[i] m[i / per_channel] over w's n elements; b_folded[c] = (b[c] - mean[c]) m[c]
// + bias[c] over the channels (b null: 0).
template <typename T>
__device__ void batch_norm_fold_impl(const T* w, const T* scale, const T* bias, const T* mean, const T* var,
                                     const T* b, T* w_folded, T* b_folded, int64_t n, int64_t per_channel,
                                     int64_t channels, double epsilon) {
    GRID_STRIDE_LOOP(i, max(n, channels)) {
        if (i < n) {
            const double m = fold_factor(scale, var, i / per_channel, epsilon);
            w_folded[i] = from_acc<T>((acc_t<T>)((double)to_acc<T>(w[i]) * m));
        }
        if (i < channels) {
            const double shift = (b ? (double)to_acc<T>(b[i]) : 0.0) - (double)to_acc<T>(mean[i]);
            const double folded = shift * fold_factor(scale, var, i, epsilon) + (double)to_acc<T>(bias[i]);
            b_folded[i] = from_acc<T>((acc_t<T>)folded);
        }
    }
}

// Block (ch, s) of a (channels, splits) grid has added its share of channel ch's bias gradient
// into acc: the block's sum goes to partial[ch * splits + s]; the channel's last block to finish
// (counted in counter[ch], which it resets for the next launch) adds the partial sums in the
// order s = 0, 1, ...: a fixed order, so db is reproducible.  Every thread calls it.
template <typename T>
__device__ void finish_channel_sum(acc_t<T> acc, int64_t ch, T* db, double* partial, unsigned int* counter) {
    const double total = block_sum((double)acc);
    __shared__ bool last;
    if (threadIdx.x == 0) {
        partial[ch * gridDim.y + blockIdx.y] = total;
        __threadfence();    // the partial sum is visible before the count says so
        last = atomicAdd(counter + ch, 1u) == gridDim.y - 1;
    }
    __syncthreads();
    if (last && threadIdx.x == 0) {
        const volatile double* sums = partial + ch * gridDim.y;
        double s = 0.0;
        for (unsigned int k = 0; k < gridDim.y; ++k) s += sums[k];
        db[ch] = from_acc<T>((acc_t<T>)s);
        counter[ch] = 0;
    }
}

// Work items of a (channels, splits) grid: block (ch, s) takes items [s * chunk, (s + 1) * chunk)
// of channel ch's `items`, chunk = items / splits rounded up, UNROLL of them per thread at a
// time (their loads issued before any of their stores, so that each thread keeps several in flight).
constexpr int UNROLL = 2;

__device__ __forceinline__ void channel_range(int64_t items, int64_t& begin, int64_t& end) {
    const int64_t chunk = (items + gridDim.y - 1) / gridDim.y;
    begin = min(items, (int64_t)blockIdx.y * chunk);
    end = min(items, begin + chunk);
}

// The activation's gradient over channel ch's packs [begin, end) of V elements (per_plane packs
// to a plane of dy, v and dx: (samples, channels, plane)); returns the thread's sum of dx.  POOLED:
// dy holds one value per plane (a global average pool's gradient) and each element's incoming
// gradient is dy[plane] / plane size, rounded to T as GlobalAveragePoolGrad writes it.
template <typename T, bool POOLED, int V>
__device__ acc_t<T> activation_grad_packs(const T* __restrict__ dy, const T* __restrict__ v, T* __restrict__ dx,
                                          int64_t begin, int64_t end, int per_plane, int64_t channels, int64_t ch,
                                          int code, acc_t<T> alpha, acc_t<T> inv_plane) {
    typedef acc_t<T> A;
    A acc = 0;
    for (int64_t j0 = begin + threadIdx.x; j0 < end; j0 += UNROLL * (int64_t)blockDim.x) {
        Lanes<T, V> vin[UNROLL], din[UNROLL];
        int64_t at[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int64_t j = j0 + u * (int64_t)blockDim.x;
            if (j >= end) break;
            int64_t sample;
            int k;
            split_index(j, per_plane, sample, k);
            const int64_t p = sample * channels + ch;
            at[u] = p * per_plane + k;
            vin[u] = load_lanes<T, V>(v, at[u]);
            if (POOLED) {
                const T g = from_acc<T>(to_acc<T>(dy[p]) * inv_plane);
#pragma unroll
                for (int e = 0; e < V; ++e) din[u].v[e] = g;
            } else {
                din[u] = load_lanes<T, V>(dy, at[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (j0 + u * (int64_t)blockDim.x >= end) break;
            Lanes<T, V> out;
#pragma unroll
            for (int e = 0; e < V; ++e) {
                out.v[e] = from_acc<T>(activation_grad(code, to_acc<T>(din[u].v[e]), to_acc<T>(vin[u].v[e]), alpha));
                acc += to_acc<T>(out.v[e]);
            }
            store_lanes<T, V>(dx, at[u], out);
        }
    }
    return acc;
}

// dy (or, POOLED, one value per plane), v, dx: (samples, channels, plane).  Block (ch, s) computes
// dx over its share of channel ch and their sum: in 16-byte packs where the plane's length and
// the pointers allow, else element by element.
template <typename T, bool POOLED>
__device__ void activation_grad_bias_impl(const T* dy, const T* v, T* dx, T* db, double* partial,
                                          unsigned int* counter, int64_t samples, int plane, int64_t channels,
                                          int code, acc_t<T> alpha) {
    constexpr int V = vec_width<T>();
    const int64_t ch = blockIdx.x;
    const acc_t<T> inv_plane = POOLED ? acc_t<T>(1) / acc_t<T>(plane) : acc_t<T>(1);
    const bool packed = plane % V == 0 && aligned_to(v, 16) && aligned_to(dx, 16) && (POOLED || aligned_to(dy, 16));
    const int per_plane = packed ? plane / V : plane;
    int64_t begin, end;
    channel_range(samples * per_plane, begin, end);
    const acc_t<T> acc =
        packed ? activation_grad_packs<T, POOLED, V>(dy, v, dx, begin, end, per_plane, channels, ch, code, alpha,
                                                     inv_plane)
               : activation_grad_packs<T, POOLED, 1>(dy, v, dx, begin, end, per_plane, channels, ch, code, alpha,
                                                     inv_plane);
    finish_channel_sum<T>(acc, ch, db, partial, counter);
}

// MaxPoolGrad's dX as the incoming gradient, for 1-D windows of two (a pair of x per dy): channel
// ch's packs [begin, end) of V elements of x and dx, V / 2 of dy, per_plane packs to a plane.  A
// pair's maximum is picked as tile_argmax picks it: the second where it is greater or a NaN.
template <typename T>
__device__ acc_t<T> max_pool_activation_grad_pairs(const T* __restrict__ dy, const T* __restrict__ x,
                                                   T* __restrict__ dx, int64_t begin, int64_t end, int per_plane,
                                                   int64_t channels, int64_t ch, int code, acc_t<T> alpha) {
    typedef acc_t<T> A;
    constexpr int V = vec_width<T>(), H = V / 2;
    A acc = 0;
    for (int64_t j0 = begin + threadIdx.x; j0 < end; j0 += UNROLL * (int64_t)blockDim.x) {
        Lanes<T, V> xin[UNROLL];
        Lanes<T, H> din[UNROLL];
        int64_t at[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int64_t j = j0 + u * (int64_t)blockDim.x;
            if (j >= end) break;
            int64_t sample;
            int k;
            split_index(j, per_plane, sample, k);
            at[u] = (sample * channels + ch) * per_plane + k;
            xin[u] = load_lanes<T, V>(x, at[u]);
            din[u] = load_lanes<T, H>(dy, at[u]);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (j0 + u * (int64_t)blockDim.x >= end) break;
            Lanes<T, V> out;
#pragma unroll
            for (int w = 0; w < H; ++w) {
                const A x0 = to_acc<T>(xin[u].v[2 * w]), x1 = to_acc<T>(xin[u].v[2 * w + 1]);
                const A d = to_acc<T>(din[u].v[w]);
                const bool second = x1 > x0 || x1 != x1;
                out.v[2 * w] = from_acc<T>(activation_grad(code, second ? A(0) : d, x0, alpha));
                out.v[2 * w + 1] = from_acc<T>(activation_grad(code, second ? d : A(0), x1, alpha));
                acc += to_acc<T>(out.v[2 * w]);
                acc += to_acc<T>(out.v[2 * w + 1]);
            }
            store_lanes<T, V>(dx, at[u], out);
        }
    }
    return acc;
}

// The same for any windows that tile the plane, a thread per window (channel ch's windows
// [begin, end)): its maximum found again in x (tile_argmax), then dx over the window's box, dy
// of the window at the maximum and 0 elsewhere, through the activation's gradient.
template <typename T, int R>
__device__ acc_t<T> max_pool_activation_grad_windows(const T* __restrict__ dy, const T* __restrict__ x,
                                                     T* __restrict__ dx, int64_t begin, int64_t end,
                                                     int64_t channels, int64_t ch, int code, acc_t<T> alpha,
                                                     const PoolGeom& g) {
    typedef acc_t<T> A;
    const int P = plane_size(g), Q = out_size(g), H = g.size[1], W = g.size[2];
    A acc = 0;
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
        int64_t sample;
        int q;
        split_index(j, Q, sample, q);
        const int64_t p = sample * channels + ch;
        const T* xp = x + p * P;
        T* dxp = dx + p * P;
        const int first = tile_start<R>(q, g);
        const int best = tile_argmax(xp, first, g);
        const A d = to_acc<T>(dy[p * Q + q]);
        for (int a = 0; a < g.kernel[0]; ++a)
            for (int b = 0; b < g.kernel[1]; ++b)
                for (int c = 0; c < g.kernel[2]; ++c) {
                    const int k = first + (a * H + b) * W + c;
                    const T gk = from_acc<T>(activation_grad(code, k == best ? d : A(0), to_acc<T>(xp[k]), alpha));
                    dxp[k] = gk;
                    acc += to_acc<T>(gk);
                }
    }
    return acc;
}

// ActivationGradBias of MaxPoolGrad's dX, the MaxPool's windows tiling the plane of x (its input,
// read by the gradient too): block (ch, s) takes its share of channel ch's windows, in 16-byte
// packs of x for 1-D windows of two where the plane's length and the pointers allow.  Elements
// outside every window are not written (zeroed before).
template <typename T, int R>
__device__ void max_pool_activation_grad_bias_impl(const T* dy, const T* x, T* dx, T* db, double* partial,
                                                   unsigned int* counter, int64_t samples, int64_t channels,
                                                   int code, acc_t<T> alpha, PoolGeom g) {
    constexpr int V = vec_width<T>();
    const int P = plane_size(g);
    const int64_t ch = blockIdx.x;
    int64_t begin, end;
    acc_t<T> acc;
    if (R == 1 && g.kernel[2] == 2 && P % V == 0 && aligned_to(x, 16) && aligned_to(dx, 16) &&
        aligned_to(dy, sizeof(T) * V / 2)) {
        channel_range(samples * (P / V), begin, end);
        acc = max_pool_activation_grad_pairs<T>(dy, x, dx, begin, end, P / V, channels, ch, code, alpha);
    } else {
        channel_range(samples * out_size(g), begin, end);
        acc = max_pool_activation_grad_windows<T, R>(dy, x, dx, begin, end, channels, ch, code, alpha, g);
    }
    finish_channel_sum<T>(acc, ch, db, partial, counter);
}

// Row r = n * D + d holds the C scores x[n, :, d] (stride D), read by G lanes.  Writes the row's
// weighted loss (to loss_none[r], or to partial[r] with its weight in partial[rows + r]) and
// d_logits = (softmax - onehot(label)) * coef, coef = weight * dY[r] (reduction 0: none),
// weight * dY (1: sum) or weight * dY / wsum (2: mean; wsum from sce_weight_sum, or `divisor`
// when no row can weigh other than 1).
template <typename T, typename L, int G>
__device__ void sce_with_grad_impl(const T* x, const L* labels, const T* weights, const T* dy, const double* wsum,
                                   double divisor, T* dx, T* loss_none, double* partial, int64_t rows, int64_t C,
                                   int64_t D, int64_t ignore_index, int has_ignore, int reduction,
                                   unsigned long long* bad) {
    typedef acc_t<T> A;
    A scale = 0;
    if (reduction != 0) scale = reduction == 2 ? (A)((double)to_acc<T>(dy[0]) / (wsum ? wsum[0] : divisor)) : to_acc<T>(dy[0]);
    const int lane = threadIdx.x % G;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / G;
    const int64_t step = (int64_t)gridDim.x * blockDim.x / G;
    for (int64_t r = first; r < rows; r += step) {
        const int64_t n = r / D, d = r - n * D;
        const T* xr = x + n * C * D + d;
        T* gr = dx + n * C * D + d;
        const A lse = row_logsumexp<T, G>(xr, C, D, lane);
        const int64_t label = row_label(labels, r, C, ignore_index, has_ignore, bad, lane == 0);
        const A w = class_weight(weights, label);
        const A coef = w * (reduction == 0 ? to_acc<T>(dy[r]) : scale);
        for (int64_t c = lane; c < C; c += G) {
            const A g = exp(to_acc<T>(xr[c * D]) - lse) * coef;
            gr[c * D] = from_acc<T>(c == label ? g - coef : g);
        }
        if (lane == 0) {
            const A loss = label < 0 ? A(0) : -(to_acc<T>(xr[label * D]) - lse) * w;
            if (loss_none) {
                loss_none[r] = from_acc<T>(loss);
            } else {
                partial[r] = (double)loss;
                partial[rows + r] = (double)w;
            }
        }
    }
}

#define SCE_WITH_GRAD(T, S, L, LS, VARIANT, G)                                                              \
    extern "C" __global__ void sce_with_grad_##VARIANT##_##LS##_##S(                                       \
        const T* x, const L* labels, const T* weights, const T* dy, const double* wsum, double divisor,     \
        T* dx, T* loss_none, double* partial, int64_t rows, int64_t C, int64_t D, int64_t ignore_index,     \
        int has_ignore, int reduction, unsigned long long* bad) {                                           \
        sce_with_grad_impl<T, L, G>(x, labels, weights, dy, wsum, divisor, dx, loss_none, partial, rows, C, \
                                    D, ignore_index, has_ignore, reduction, bad);                           \
    }

// R: how many of the three padded spatial axes are real (tile_start)
#define MAX_POOL_ACTIVATION_GRAD_BIAS(T, S, R)                                                                \
    extern "C" __global__ void max_pool_activation_grad_bias_r##R##_##S(                                     \
        const T* dy, const T* x, T* dx, T* db, double* partial, unsigned int* counter, int64_t samples,      \
        int64_t channels, int code, acc_t<T> alpha, PoolGeom g) {                                           \
        max_pool_activation_grad_bias_impl<T, R>(dy, x, dx, db, partial, counter, samples, channels, code,    \
                                                 alpha, g);                                                 \
    }

#define FUSED(T, S)                                                                                          \
    extern "C" __global__ void bias_activation_##S(T* y, const T* bias, int64_t n, int64_t outer_div,       \
                                                   int64_t outer_mod, int64_t outer_stride, int64_t inner_mod, \
                                                   int64_t inner_stride, acc_t<T> beta, int code,           \
                                                   acc_t<T> alpha, acc_t<T> alpha2) {                       \
        bias_activation_impl<T>(y, bias, n, outer_div, outer_mod, outer_stride, inner_mod, inner_stride, beta, \
                                code, alpha, alpha2);                                                       \
    }                                                                                                        \
    extern "C" __global__ void activation_grad_bias_##S(const T* dy, const T* v, T* dx, T* db, double* partial, \
                                                        unsigned int* counter, int64_t samples, int plane,  \
                                                        int64_t channels, int code, acc_t<T> alpha) {       \
        activation_grad_bias_impl<T, false>(dy, v, dx, db, partial, counter, samples, plane, channels, code,   \
                                            alpha);                                                         \
    }                                                                                                        \
    extern "C" __global__ void global_average_pool_activation_grad_bias_##S(                                 \
        const T* dy, const T* v, T* dx, T* db, double* partial, unsigned int* counter, int64_t samples,      \
        int plane, int64_t channels, int code, acc_t<T> alpha) {                                            \
        activation_grad_bias_impl<T, true>(dy, v, dx, db, partial, counter, samples, plane, channels, code,    \
                                           alpha);                                                          \
    }                                                                                                        \
    extern "C" __global__ void batch_norm_fold_##S(const T* w, const T* scale, const T* bias, const T* mean,  \
                                                   const T* var, const T* b, T* w_folded, T* b_folded,      \
                                                   int64_t n, int64_t per_channel, int64_t channels,        \
                                                   double epsilon) {                                        \
        batch_norm_fold_impl<T>(w, scale, bias, mean, var, b, w_folded, b_folded, n, per_channel, channels,  \
                                epsilon);                                                                   \
    }                                                                                                        \
    MAX_POOL_ACTIVATION_GRAD_BIAS(T, S, 1) MAX_POOL_ACTIVATION_GRAD_BIAS(T, S, 2)                            \
    MAX_POOL_ACTIVATION_GRAD_BIAS(T, S, 3)                                                                   \
    SCE_WITH_GRAD(T, S, int64_t, i64, warp, 32) SCE_WITH_GRAD(T, S, int64_t, i64, thread, 1)                 \
    SCE_WITH_GRAD(T, S, int32_t, i32, warp, 32) SCE_WITH_GRAD(T, S, int32_t, i32, thread, 1)
MT_FOR_FLOATS(FUSED)
