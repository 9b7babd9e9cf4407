// Softmax / LogSoftmax and their gradients over an (outer, n, inner) layout: `outer` rows of n
// elements, each element `inner` apart (inner is 1 for opsets 1-12, which coerce to 2-D, and
// for an innermost opset-13 axis).  Everything is computed in the accumulation type with
// ext/softmax.pyx's formulas:
//   Softmax     y = exp(x - m) * (1 / s)      SoftmaxGrad     dx = y (dy - sum(y dy))
//   LogSoftmax  y = x - (m + log s)           LogSoftmaxGrad  dx = dy - exp(y) sum(dy)
// with m the row's maximum and s = sum(exp(x - m)).  Three layouts:
//   *_warp<E>_<T>   inner 1, n <= 32 E: a warp per row, which holds it in registers (E per
//                   lane), so x (dy and y) is read once; 4 rows per block of 128 threads.
//   *_block_<T>     inner 1, longer rows: a block per row, one pass per reduction.
//   *_strided_<T>   inner > 1: a thread per (outer, inner) line, adjacent threads reading
//                   adjacent elements.
#include <math.h>

#include "common.cuh"

__device__ __forceinline__ float exp_acc(float v) { return expf(v); }
__device__ __forceinline__ double exp_acc(double v) { return exp(v); }
__device__ __forceinline__ float log_acc(float v) { return logf(v); }
__device__ __forceinline__ double log_acc(double v) { return log(v); }

// The row maximum as ext/softmax.pyx takes it (v > m ? v : m: a NaN never becomes the max).
template <typename A> __device__ __forceinline__ A max_of(A m, A v) { return v > m ? v : m; }

template <typename A> __device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s);
    return v;
}
template <typename A> __device__ __forceinline__ A warp_max(A v) {
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) v = max_of(v, __shfl_xor_sync(0xffffffffu, v, s));
    return v;
}

// The sum (or max) of v over the block, in every thread.  `shared` holds 32 values.
template <typename A, bool MAX> __device__ __forceinline__ A block_reduce(A v, A* shared) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < warps ? shared[lane] : MAX ? shared[0] : A(0);
    v = MAX ? warp_max(v) : warp_sum(v);
    __syncthreads();    // shared is reused by the next reduction
    return v;
}

// ------------------------------------------------------------------------- a warp per row
template <typename T, int E>
__device__ void softmax_warp_impl(const T* x, T* y, int64_t rows, int n, int log_softmax) {
    typedef acc_t<T> A;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    x += row * n;
    y += row * n;
    A v[E];
#pragma unroll
    for (int k = 0; k < E; ++k) {       // every load issued before the first max
        const int j = k * 32 + lane;
        v[k] = j < n ? to_acc<T>(x[j]) : A(-INFINITY);
    }
    A m = v[0];
#pragma unroll
    for (int k = 1; k < E; ++k) m = max_of(m, v[k]);
    m = warp_max(m);
    A s = 0;
#pragma unroll
    for (int k = 0; k < E; ++k) {
        const A e = k * 32 + lane < n ? exp_acc(v[k] - m) : A(0);
        s += e;
        if (!log_softmax) v[k] = e;
    }
    s = warp_sum(s);
    const A shift = m + log_acc(s), inv = A(1) / s;
#pragma unroll
    for (int k = 0; k < E; ++k) {
        const int j = k * 32 + lane;
        if (j < n) y[j] = from_acc<T>(log_softmax ? v[k] - shift : v[k] * inv);
    }
}

template <typename T, int E>
__device__ void softmax_grad_warp_impl(const T* dy, const T* y, T* dx, int64_t rows, int n, int log_softmax) {
    typedef acc_t<T> A;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    dy += row * n;
    y += row * n;
    dx += row * n;
    A g[E], w[E];
    A s = 0;
#pragma unroll
    for (int k = 0; k < E; ++k) {
        const int j = k * 32 + lane;
        g[k] = j < n ? to_acc<T>(dy[j]) : A(0);
        w[k] = j < n ? to_acc<T>(y[j]) : A(0);
    }
#pragma unroll
    for (int k = 0; k < E; ++k) {    // LogSoftmaxGrad's exps are taken while the sum's shuffles wait
        s += log_softmax ? g[k] : g[k] * w[k];
        if (log_softmax) w[k] = exp_acc(w[k]);
    }
    s = warp_sum(s);
#pragma unroll
    for (int k = 0; k < E; ++k) {
        const int j = k * 32 + lane;
        if (j < n) dx[j] = from_acc<T>(log_softmax ? g[k] - w[k] * s : w[k] * (g[k] - s));
    }
}

// ------------------------------------------------------------------------ a block per row
template <typename T>
__device__ void softmax_block_impl(const T* x, T* y, int64_t rows, int64_t n, int log_softmax) {
    typedef acc_t<T> A;
    __shared__ A shared[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * n;
        T* yr = y + row * n;
        A m = to_acc<T>(xr[0]);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = max_of(m, to_acc<T>(xr[j]));
        m = block_reduce<A, true>(m, shared);
        A s = 0;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += exp_acc(to_acc<T>(xr[j]) - m);
        s = block_reduce<A, false>(s, shared);
        const A shift = m + log_acc(s), inv = A(1) / s;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            const A v = to_acc<T>(xr[j]);
            yr[j] = from_acc<T>(log_softmax ? v - shift : exp_acc(v - m) * inv);
        }
    }
}

template <typename T>
__device__ void softmax_grad_block_impl(const T* dy, const T* y, T* dx, int64_t rows, int64_t n, int log_softmax) {
    typedef acc_t<T> A;
    __shared__ A shared[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* g = dy + row * n;
        const T* w = y + row * n;
        T* out = dx + row * n;
        A s = 0;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            s += log_softmax ? to_acc<T>(g[j]) : to_acc<T>(g[j]) * to_acc<T>(w[j]);
        s = block_reduce<A, false>(s, shared);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            const A gj = to_acc<T>(g[j]), wj = to_acc<T>(w[j]);
            out[j] = from_acc<T>(log_softmax ? gj - exp_acc(wj) * s : wj * (gj - s));
        }
    }
}

// --------------------------------------------------------------- a thread per strided line
template <typename T>
__device__ void softmax_strided_impl(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, int log_softmax) {
    typedef acc_t<T> A;
    GRID_STRIDE_LOOP(line, outer * inner) {
        const int64_t start = (line / inner) * n * inner + line % inner;
        const T* xl = x + start;
        T* yl = y + start;
        A m = to_acc<T>(xl[0]);
        for (int64_t j = 1; j < n; ++j) m = max_of(m, to_acc<T>(xl[j * inner]));
        A s = 0;
        for (int64_t j = 0; j < n; ++j) s += exp_acc(to_acc<T>(xl[j * inner]) - m);
        const A shift = m + log_acc(s), inv = A(1) / s;
        for (int64_t j = 0; j < n; ++j) {
            const A v = to_acc<T>(xl[j * inner]);
            yl[j * inner] = from_acc<T>(log_softmax ? v - shift : exp_acc(v - m) * inv);
        }
    }
}

template <typename T>
__device__ void softmax_grad_strided_impl(const T* dy, const T* y, T* dx, int64_t outer, int64_t n, int64_t inner,
                                          int log_softmax) {
    typedef acc_t<T> A;
    GRID_STRIDE_LOOP(line, outer * inner) {
        const int64_t start = (line / inner) * n * inner + line % inner;
        const T* g = dy + start;
        const T* w = y + start;
        T* out = dx + start;
        A s = 0;
        for (int64_t j = 0; j < n; ++j)
            s += log_softmax ? to_acc<T>(g[j * inner]) : to_acc<T>(g[j * inner]) * to_acc<T>(w[j * inner]);
        for (int64_t j = 0; j < n; ++j) {
            const A gj = to_acc<T>(g[j * inner]), wj = to_acc<T>(w[j * inner]);
            out[j * inner] = from_acc<T>(log_softmax ? gj - exp_acc(wj) * s : wj * (gj - s));
        }
    }
}

#define SOFTMAX_WARP(T, S, E)                                                                       \
    extern "C" __global__ void softmax_warp##E##_##S(const T* x, T* y, int64_t rows, int n, int log_softmax) { \
        softmax_warp_impl<T, E>(x, y, rows, n, log_softmax);                                        \
    }                                                                                               \
    extern "C" __global__ void softmax_grad_warp##E##_##S(const T* dy, const T* y, T* dx, int64_t rows, int n, \
                                                          int log_softmax) {                        \
        softmax_grad_warp_impl<T, E>(dy, y, dx, rows, n, log_softmax);                              \
    }
#define SOFTMAX(T, S)                                                                               \
    SOFTMAX_WARP(T, S, 1) SOFTMAX_WARP(T, S, 2) SOFTMAX_WARP(T, S, 4) SOFTMAX_WARP(T, S, 8)         \
    SOFTMAX_WARP(T, S, 16) SOFTMAX_WARP(T, S, 32)                                                   \
    extern "C" __global__ void softmax_block_##S(const T* x, T* y, int64_t rows, int64_t n, int log_softmax) { \
        softmax_block_impl<T>(x, y, rows, n, log_softmax);                                          \
    }                                                                                               \
    extern "C" __global__ void softmax_grad_block_##S(const T* dy, const T* y, T* dx, int64_t rows, int64_t n, \
                                                      int log_softmax) {                            \
        softmax_grad_block_impl<T>(dy, y, dx, rows, n, log_softmax);                                \
    }                                                                                               \
    extern "C" __global__ void softmax_strided_##S(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, \
                                                   int log_softmax) {                               \
        softmax_strided_impl<T>(x, y, outer, n, inner, log_softmax);                                \
    }                                                                                               \
    extern "C" __global__ void softmax_grad_strided_##S(const T* dy, const T* y, T* dx, int64_t outer, int64_t n, \
                                                        int64_t inner, int log_softmax) {           \
        softmax_grad_strided_impl<T>(dy, y, dx, outer, n, inner, log_softmax);                      \
    }
MT_FOR_FLOATS(SOFTMAX)
