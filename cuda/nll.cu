// NegativeLogLikelihoodLoss and its gradient over log-probabilities viewed as (N, C, D) (D the
// product of the dims after the class dim).  Targets are checked as the softmax cross-entropy
// kernels check labels (cross_entropy_rows.cuh): one outside [0, C) that is not ignore_index
// counts as ignored and is recorded in `bad` for the host to raise on.  The mean and the sum
// reuse cuda/loss.cu's sce_reduce (partial losses and weights in double, a fixed order), and the
// gradient's divisor its sce_weight_sum.
#include "common.cuh"
#include "cross_entropy_rows.cuh"

// Row r = n * D + d: -x[n, target, d] * weight[target], to loss_none[r] (reduction none) or to
// partial[r] with its weight in partial[rows + r].
template <typename T, typename L>
__device__ void nll_forward_impl(const T* x, const L* target, const T* weights, T* loss_none, double* partial,
                                 int64_t rows, int64_t C, int64_t D, int64_t ignore_index, int has_ignore,
                                 unsigned long long* bad) {
    typedef acc_t<T> A;
    GRID_STRIDE_LOOP(r, rows) {
        const int64_t n = r / D, d = r - n * D;
        const int64_t label = row_label(target, r, C, ignore_index, has_ignore, bad, true);
        const A w = class_weight(weights, label);
        const A loss = label < 0 ? A(0) : -to_acc<T>(x[(n * C + label) * D + d]) * w;
        if (loss_none) {
            loss_none[r] = from_acc<T>(loss);
        } else {
            partial[r] = (double)loss;
            partial[rows + r] = (double)w;
        }
    }
}

// dx = -coef at each row's target class, 0 elsewhere; coef = weight * dY[r] (none), weight * dY
// (sum) or weight * dY / wsum (mean).  The c = 0 element of each row reports a bad target.
template <typename T, typename L>
__device__ void nll_grad_impl(const T* dy, const L* target, const T* weights, const double* wsum, T* dx, int64_t N,
                              int64_t C, int64_t D, int64_t ignore_index, int has_ignore, int reduction,
                              unsigned long long* bad) {
    typedef acc_t<T> A;
    const int64_t CD = C * D;
    A scale = 0;
    if (reduction != 0) scale = reduction == 2 ? (A)((double)to_acc<T>(dy[0]) / wsum[0]) : to_acc<T>(dy[0]);
    GRID_STRIDE_LOOP(i, N * CD) {
        const int64_t n = i / CD, cd = i - n * CD, c = cd / D, d = cd - c * D, r = n * D + d;
        const int64_t label = row_label(target, r, C, ignore_index, has_ignore, bad, c == 0);
        const A coef = class_weight(weights, label) * (reduction == 0 ? to_acc<T>(dy[r]) : scale);
        dx[i] = from_acc<T>(c == label ? -coef : A(0));
    }
}

#define NLL(T, S, L, LS)                                                                                   \
    extern "C" __global__ void nll_forward_##LS##_##S(const T* x, const L* target, const T* weights,      \
                                                      T* loss_none, double* partial, int64_t rows, int64_t C, \
                                                      int64_t D, int64_t ignore_index, int has_ignore,    \
                                                      unsigned long long* bad) {                          \
        nll_forward_impl<T, L>(x, target, weights, loss_none, partial, rows, C, D, ignore_index, has_ignore, \
                               bad);                                                                      \
    }                                                                                                     \
    extern "C" __global__ void nll_grad_##LS##_##S(const T* dy, const L* target, const T* weights,        \
                                                   const double* wsum, T* dx, int64_t N, int64_t C, int64_t D, \
                                                   int64_t ignore_index, int has_ignore, int reduction,   \
                                                   unsigned long long* bad) {                             \
        nll_grad_impl<T, L>(dy, target, weights, wsum, dx, N, C, D, ignore_index, has_ignore, reduction, bad); \
    }
#define NLL_LABELS(T, S) NLL(T, S, int64_t, i64) NLL(T, S, int32_t, i32)
MT_FOR_FLOATS(NLL_LABELS)
