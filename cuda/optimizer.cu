// Optimizer updates over many tensors at once, written in place (the only kernels besides
// InPlaceAccumulator that write into their inputs), and the global gradient norm.
//
// A launch covers every parameter of a model through a table built by the host
// (minitrain/providers/cuda/optimizer.py): `tensors` rows of TABLE_COLS int64 (the addresses of
// param, grad, state 1, state 2, and the element count), then one (tensor, first element) pair
// per block; block b updates `chunk` elements of its tensor from there.  The clipping scale is
// read from device memory, written by mt_norm_finish, so a clipped step never waits for the host;
// so is the go-ahead of an update that skips itself on a non-finite gradient (skip_non_finite).
// Formulas and rounding follow ext/optimizer.pyx (PyTorch's SGD, Adam, AdamW).  Float32
// parameters may have float16 or bfloat16 gradients, read through with_gradient
// (multi_tensor.cuh): the update is that of the gradient's exact float32 widening.
#include "common.cuh"
#include "block_sum.cuh"
#include "multi_tensor.cuh"

// partial[b] = the sum of squares of block b's gradient elements, in double.
template <typename T> __device__ void mt_sq_norm_impl(const int64_t* table, int64_t tensors, int64_t chunk, double* partial) {
    const Chunk c = block_chunk(table, tensors, chunk);
    double s = 0.0;
    with_gradient<T>(c, [&](auto g) {
        for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
            const double v = (double)to_acc(g[i]);
            s += v * v;
        }
    });
    s = block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// grad_norm = sqrt(sum of partials); scale[0] = min(1, max_norm / (norm + 1e-6)) (1 when
// max_norm is 0), clip_grad_norm_'s factor; scale[1] = 0 where the update must not run (skip set
// and the norm inf or NaN), else 1; one block.  grad_norm may be null.
template <typename T>
__device__ void mt_norm_finish_impl(const double* partial, int64_t blocks, T* grad_norm, double* scale, double max_norm,
                                    int skip_non_finite) {
    double s = 0.0;
    for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) s += partial[b];
    s = block_sum(s);
    if (threadIdx.x == 0) {
        const double norm = sqrt(s);
        if (grad_norm) grad_norm[0] = from_acc<T>((acc_t<T>)norm);
        scale[0] = max_norm > 0 ? fmin(1.0, max_norm / (norm + 1e-6)) : 1.0;
        scale[1] = skip_non_finite && !isfinite(norm) ? 0.0 : 1.0;
    }
}

// Whether the update goes ahead: no scale written (nothing to clip or skip), or its go-ahead set.
__device__ __forceinline__ bool update_runs(const double* scale) { return !scale || scale[1] != 0.0; }

// d = scale*g + wd*w; buf = momentum*buf + d; d = d + momentum*buf (nesterov) or buf; w -= lr*d.
// The learning rate is read from device memory, so a captured step follows a schedule.  With
// parameter groups, lr_stride is 1 (one rate per parameter) and `decays` holds one weight decay
// per parameter in place of `weight_decay`.
template <typename T>
__device__ void mt_sgd_impl(const int64_t* table, int64_t tensors, int64_t chunk, const double* scale,
                            const T* learning_rate, int64_t lr_stride, const double* decays,
                            acc_t<T> momentum, acc_t<T> uniform_decay, int nesterov) {
    typedef acc_t<T> A;
    if (!update_runs(scale)) return;
    const Chunk c = block_chunk(table, tensors, chunk);
    const A lr = to_acc<T>(learning_rate[lr_stride * c.tensor]);
    const A weight_decay = decays ? (A)decays[c.tensor] : uniform_decay;
    T* w = column<T>(c, 0);
    T* buf = column<T>(c, 2);
    const A sc = scale ? (A)scale[0] : A(1);
    with_gradient<T>(c, [&](auto g) {
        for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
            const A wi = to_acc<T>(w[i]);
            A d = sc * (A)to_acc(g[i]) + weight_decay * wi;
            if (buf) {
                const A b = momentum * to_acc<T>(buf[i]) + d;
                buf[i] = from_acc<T>(b);
                d = nesterov ? d + momentum * b : b;
            }
            w[i] = from_acc<T>(wi - lr * d);
        }
    });
}

// Adam (decay added to the gradient: weight_decay != 0, shrink 1) and AdamW (decoupled: w
// scaled by shrink = 1 - lr*wd first); step = lr / (1 - beta1^t), inv_sqrt_bias2 =
// 1 / sqrt(1 - beta2^t), worked out in double from the learning rate and t read from device
// memory (so a captured step follows the schedule and the step count).  Parameter groups: as
// in mt_sgd_impl.  adam_mode 1 is Hugging Face's AdamW: step = lr * sqrt(1 - beta2^t) /
// (1 - beta1^t), epsilon added to sqrt(v) itself, and w scaled by shrink after the update.
// correct_bias 0 drops both bias corrections (1 - beta^t taken as 1), as AdamWOptimizer allows.
template <typename T>
__device__ void mt_adam_impl(const int64_t* table, int64_t tensors, int64_t chunk, const double* scale, double beta1_d,
                             double beta2_d, acc_t<T> eps, double uniform_decay, int decoupled,
                             const T* learning_rate, const int64_t* step_count, int64_t lr_stride,
                             const double* decays, int adam_mode, int correct_bias) {
    typedef acc_t<T> A;
    if (!update_runs(scale)) return;
    const Chunk c = block_chunk(table, tensors, chunk);
    const double lr_d = (double)to_acc<T>(learning_rate[lr_stride * c.tensor]);
    const double weight_decay_d = decays ? decays[c.tensor] : uniform_decay;
    const double t = (double)step_count[0];
    const A beta1 = (A)beta1_d, beta2 = (A)beta2_d;
    const A weight_decay = decoupled ? A(0) : (A)weight_decay_d;
    const A shrink = decoupled ? (A)(1.0 - lr_d * weight_decay_d) : A(1);
    const A shrink_before = adam_mode == 0 ? shrink : A(1), shrink_after = adam_mode == 0 ? A(1) : shrink;
    const double bias1 = correct_bias ? 1.0 - pow(beta1_d, t) : 1.0;
    const double bias2 = correct_bias ? 1.0 - pow(beta2_d, t) : 1.0;
    const A step = (A)(adam_mode == 0 ? lr_d / bias1 : lr_d * sqrt(bias2) / bias1);
    const A inv_sqrt_bias2 = adam_mode == 0 ? (A)(1.0 / sqrt(bias2)) : A(1);
    T* w = column<T>(c, 0);
    T* m = column<T>(c, 2);
    T* v = column<T>(c, 3);
    const A sc = scale ? (A)scale[0] : A(1);
    with_gradient<T>(c, [&](auto g) {
        for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
            const A wi = to_acc<T>(w[i]);
            const A d = sc * (A)to_acc(g[i]) + weight_decay * wi;
            const A mi = beta1 * to_acc<T>(m[i]) + (A(1) - beta1) * d;
            const A vi = beta2 * to_acc<T>(v[i]) + (A(1) - beta2) * d * d;
            m[i] = from_acc<T>(mi);
            v[i] = from_acc<T>(vi);
            w[i] = from_acc<T>((wi * shrink_before - step * mi / (sqrt(vi) * inv_sqrt_bias2 + eps)) * shrink_after);
        }
    });
}

#define OPTIMIZER(T, S)                                                                                  \
    extern "C" __global__ void mt_sq_norm_##S(const int64_t* table, int64_t tensors, int64_t chunk,      \
                                              double* partial) {                                         \
        mt_sq_norm_impl<T>(table, tensors, chunk, partial);                                              \
    }                                                                                                    \
    extern "C" __global__ void mt_norm_finish_##S(const double* partial, int64_t blocks, T* grad_norm,   \
                                                  double* scale, double max_norm, int skip_non_finite) { \
        mt_norm_finish_impl<T>(partial, blocks, grad_norm, scale, max_norm, skip_non_finite);            \
    }                                                                                                    \
    extern "C" __global__ void mt_sgd_##S(const int64_t* table, int64_t tensors, int64_t chunk,          \
                                          const double* scale, const T* lr, int64_t lr_stride,           \
                                          const double* decays, acc_t<T> momentum,                       \
                                          acc_t<T> weight_decay, int nesterov) {                         \
        mt_sgd_impl<T>(table, tensors, chunk, scale, lr, lr_stride, decays, momentum, weight_decay,      \
                       nesterov);                                                                        \
    }                                                                                                    \
    extern "C" __global__ void mt_adam_##S(const int64_t* table, int64_t tensors, int64_t chunk,         \
                                           const double* scale, double beta1, double beta2,              \
                                           acc_t<T> eps, double weight_decay, int decoupled,             \
                                           const T* lr, const int64_t* step, int64_t lr_stride,          \
                                           const double* decays, int adam_mode, int correct_bias) {      \
        mt_adam_impl<T>(table, tensors, chunk, scale, beta1, beta2, eps, weight_decay, decoupled, lr,    \
                        step, lr_stride, decays, adam_mode, correct_bias);                               \
    }
MT_FOR_FLOATS(OPTIMIZER)
