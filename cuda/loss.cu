// Loss kernels: SoftmaxCrossEntropyLoss and its gradient over scores viewed as (N, C, D)
// (D the product of the dims after the class dim), and MSELoss and its gradient.
//
// A label outside [0, C) that is not ignore_index is never read through: the row counts as
// ignored, and the first such label is recorded in `bad` ([0] set to 1, [1] the label), which
// the host reads without stalling the stream (minitrain/providers/cuda/loss.py's LabelGuard).
// Sums run in double and in a fixed order (cuda/block_sum.cuh), so results are reproducible.
#include "common.cuh"
#include "block_sum.cuh"
#include "cross_entropy_rows.cuh"

// Row r = n * D + d holds the C scores x[n, :, d] (stride D), read by G lanes.  Writes
// log_prob (when given) and the row's weighted loss: to loss_none[r] (reduction none) or to
// partial[r], with its weight in partial[rows + r] (mean and sum, reduced by sce_reduce).
template <typename T, typename L, int G>
__device__ void sce_forward_impl(const T* x, const L* labels, const T* weights, T* log_prob, T* loss_none,
                                 double* partial, int64_t rows, int64_t C, int64_t D, int64_t ignore_index,
                                 int has_ignore, unsigned long long* bad) {
    typedef acc_t<T> A;
    const int lane = threadIdx.x % G;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / G;
    const int64_t step = (int64_t)gridDim.x * blockDim.x / G;
    for (int64_t r = first; r < rows; r += step) {
        const int64_t n = r / D, d = r - n * D;
        const T* xr = x + n * C * D + d;
        const A lse = row_logsumexp<T, G>(xr, C, D, lane);
        if (log_prob) {
            T* yr = log_prob + n * C * D + d;
            for (int64_t c = lane; c < C; c += G) yr[c * D] = from_acc<T>(to_acc<T>(xr[c * D]) - lse);
        }
        if (lane == 0) {
            const int64_t label = row_label(labels, r, C, ignore_index, has_ignore, bad, true);
            const A w = class_weight(weights, label);
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

// out = sum(partial[:rows]) / sum(partial[rows:]) (mean) or sum(partial[:rows]) (sum); one block.
template <typename T>
__device__ void sce_reduce_impl(const double* partial, int64_t rows, int mean, T* out) {
    double loss = 0.0, weight = 0.0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
        loss += partial[r];
        weight += partial[rows + r];
    }
    loss = block_sum(loss);
    weight = block_sum(weight);
    if (threadIdx.x == 0) out[0] = from_acc<T>((acc_t<T>)(mean ? loss / weight : loss));
}

// The first level of sce_reduce over many rows: block b writes the sums of partial[r] and
// partial[rows + r] over its chunk of rows [b * chunk, (b + 1) * chunk) to sums[b] and
// sums[gridDim.x + b], which sce_reduce then adds up as gridDim.x rows.
__device__ void sce_reduce_chunks_impl(const double* partial, int64_t rows, int64_t chunk, double* sums) {
    const int64_t begin = (int64_t)blockIdx.x * chunk, end = min(rows, begin + chunk);
    double loss = 0.0, weight = 0.0;
    for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x) {
        loss += partial[r];
        weight += partial[rows + r];
    }
    loss = block_sum(loss);
    weight = block_sum(weight);
    if (threadIdx.x == 0) {
        sums[blockIdx.x] = loss;
        sums[gridDim.x + blockIdx.x] = weight;
    }
}

// wsum[b] = the sum of the weights of block b's chunk of rows [b * chunk, (b + 1) * chunk),
// labels checked: with one block over every row, the mean's divisor; with more, the partial
// sums that sce_sum adds up.
template <typename T, typename L>
__device__ void sce_weight_sum_impl(const L* labels, const T* weights, int64_t rows, int64_t chunk, int64_t C,
                                    int64_t ignore_index, int has_ignore, unsigned long long* bad, double* wsum) {
    const int64_t begin = (int64_t)blockIdx.x * chunk, end = min(rows, begin + chunk);
    double s = 0.0;
    for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x)
        s += (double)class_weight(weights, row_label(labels, r, C, ignore_index, has_ignore, bad, true));
    s = block_sum(s);
    if (threadIdx.x == 0) wsum[blockIdx.x] = s;
}

// out[0] = sum(partial[:count]); one block.
__device__ void sce_sum_impl(const double* partial, int64_t count, double* out) {
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
    s = block_sum(s);
    if (threadIdx.x == 0) out[0] = s;
}

// d_logits = (exp(log_prob) - onehot(label)) * coef, coef = weight * dY[r] (none), weight * dY
// (sum) or weight * dY / wsum (mean).  The c = 0 element of each row reports a bad label.
template <typename T, typename L>
__device__ void sce_grad_impl(const T* dy, const T* log_prob, const L* labels, const T* weights, const double* wsum,
                              T* dx, int64_t N, int64_t C, int64_t D, int64_t ignore_index, int has_ignore,
                              int reduction, unsigned long long* bad) {
    typedef acc_t<T> A;
    const int64_t CD = C * D;
    A scale = 0;
    if (reduction != 0) scale = reduction == 2 ? (A)((double)to_acc<T>(dy[0]) / wsum[0]) : to_acc<T>(dy[0]);
    GRID_STRIDE_LOOP(i, N * CD) {
        const int64_t n = i / CD, cd = i - n * CD, c = cd / D, d = cd - c * D, r = n * D + d;
        const int64_t label = row_label(labels, r, C, ignore_index, has_ignore, bad, c == 0);
        const A coef = class_weight(weights, label) * (reduction == 0 ? to_acc<T>(dy[r]) : scale);
        const A g = exp(to_acc<T>(log_prob[i])) * coef;
        dx[i] = from_acc<T>(c == label ? g - coef : g);
    }
}

#define SCE_KERNELS(T, S, L, LS)                                                                           \
    extern "C" __global__ void sce_forward_warp_##LS##_##S(                                                \
        const T* x, const L* labels, const T* weights, T* log_prob, T* loss_none, double* partial,         \
        int64_t rows, int64_t C, int64_t D, int64_t ignore_index, int has_ignore, unsigned long long* bad) { \
        sce_forward_impl<T, L, 32>(x, labels, weights, log_prob, loss_none, partial, rows, C, D,           \
                                   ignore_index, has_ignore, bad);                                         \
    }                                                                                                      \
    extern "C" __global__ void sce_forward_thread_##LS##_##S(                                              \
        const T* x, const L* labels, const T* weights, T* log_prob, T* loss_none, double* partial,         \
        int64_t rows, int64_t C, int64_t D, int64_t ignore_index, int has_ignore, unsigned long long* bad) { \
        sce_forward_impl<T, L, 1>(x, labels, weights, log_prob, loss_none, partial, rows, C, D,            \
                                  ignore_index, has_ignore, bad);                                          \
    }                                                                                                      \
    extern "C" __global__ void sce_weight_sum_##LS##_##S(const L* labels, const T* weights, int64_t rows,  \
                                                         int64_t chunk, int64_t C, int64_t ignore_index,   \
                                                         int has_ignore, unsigned long long* bad,          \
                                                         double* wsum) {                                   \
        sce_weight_sum_impl<T, L>(labels, weights, rows, chunk, C, ignore_index, has_ignore, bad, wsum);   \
    }                                                                                                      \
    extern "C" __global__ void sce_grad_##LS##_##S(                                                        \
        const T* dy, const T* log_prob, const L* labels, const T* weights, const double* wsum, T* dx,       \
        int64_t N, int64_t C, int64_t D, int64_t ignore_index, int has_ignore, int reduction,              \
        unsigned long long* bad) {                                                                         \
        sce_grad_impl<T, L>(dy, log_prob, labels, weights, wsum, dx, N, C, D, ignore_index, has_ignore,    \
                            reduction, bad);                                                               \
    }

#define SCE(T, S)                                                                                 \
    SCE_KERNELS(T, S, int64_t, i64)                                                               \
    SCE_KERNELS(T, S, int32_t, i32)                                                               \
    extern "C" __global__ void sce_reduce_##S(const double* partial, int64_t rows, int mean, T* out) { \
        sce_reduce_impl<T>(partial, rows, mean, out);                                             \
    }                                                                                             \
    /* the sums in double are the same for every T: named per T for the launcher */               \
    extern "C" __global__ void sce_reduce_chunks_##S(const double* partial, int64_t rows, int64_t chunk, \
                                                     double* sums) {                              \
        sce_reduce_chunks_impl(partial, rows, chunk, sums);                                       \
    }                                                                                             \
    extern "C" __global__ void sce_sum_##S(const double* partial, int64_t count, double* out) {   \
        sce_sum_impl(partial, count, out);                                                        \
    }
MT_FOR_FLOATS(SCE)

// ---------------------------------------------------------------------------------- MSELoss
template <typename T> __device__ __forceinline__ acc_t<T> diff(const T* p, const T* t, int64_t i) {
    return to_acc<T>(p[i]) - to_acc<T>(t[i]);
}

// loss = (prediction - target)^2 elementwise (reduction none).
template <typename T> __device__ void mse_none_impl(const T* p, const T* t, T* out, int64_t n) {
    GRID_STRIDE_LOOP(i, n) {
        const acc_t<T> d = diff(p, t, i);
        out[i] = from_acc<T>(d * d);
    }
}

// partial[b] = the sum of squared differences over chunk b of `chunk` elements.
template <typename T> __device__ void mse_partial_impl(const T* p, const T* t, double* partial, int64_t n, int64_t chunk) {
    const int64_t begin = (int64_t)blockIdx.x * chunk, end = min(n, begin + chunk);
    double s = 0.0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        const double d = (double)diff(p, t, i);
        s += d * d;
    }
    s = block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// out = sum(partial[:blocks]) / divisor; one block.
template <typename T> __device__ void mse_finish_impl(const double* partial, int64_t blocks, T* out, double divisor) {
    double s = 0.0;
    for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) s += partial[b];
    s = block_sum(s);
    if (threadIdx.x == 0) out[0] = from_acc<T>((acc_t<T>)(s / divisor));
}

// d_prediction = (prediction - target) * dY * factor, factor = 2 (/ size for mean); dY is one
// scalar (dy_step 0) or one value per element (dy_step 1).
template <typename T>
__device__ void mse_grad_impl(const T* p, const T* t, const T* dy, T* out, int64_t n, int64_t dy_step,
                              acc_t<T> factor) {
    GRID_STRIDE_LOOP(i, n) out[i] = from_acc<T>(diff(p, t, i) * to_acc<T>(dy[i * dy_step]) * factor);
}

#define MSE(T, S)                                                                                       \
    extern "C" __global__ void mse_none_##S(const T* p, const T* t, T* out, int64_t n) {                \
        mse_none_impl<T>(p, t, out, n);                                                                 \
    }                                                                                                   \
    extern "C" __global__ void mse_partial_##S(const T* p, const T* t, double* partial, int64_t n,      \
                                               int64_t chunk) {                                         \
        mse_partial_impl<T>(p, t, partial, n, chunk);                                                   \
    }                                                                                                   \
    extern "C" __global__ void mse_finish_##S(const double* partial, int64_t blocks, T* out, double divisor) { \
        mse_finish_impl<T>(partial, blocks, out, divisor);                                              \
    }                                                                                                   \
    extern "C" __global__ void mse_grad_##S(const T* p, const T* t, const T* dy, T* out, int64_t n,     \
                                            int64_t dy_step, acc_t<T> factor) {                         \
        mse_grad_impl<T>(p, t, dy, out, n, dy_step, factor);                                            \
    }
MT_FOR_FLOATS(MSE)
