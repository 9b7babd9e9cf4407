// ONNX Runtime's training optimizers, AdamWOptimizer and SGDOptimizerV2 (com.microsoft), over
// every parameter in one multi-tensor launch (multi_tensor.cuh's table), updating parameters
// and moments in place.  The formulas and their order follow ONNX Runtime's CPU kernels
// (minitrain/ops/ort_optimizer.py).  The learning rate and the step are read from device memory
// and the bias corrections worked out there (the powers in double, as ONNX Runtime's
// std::pow(float, int64)), so that a captured optimizer step follows both.
#include "common.cuh"
#include "multi_tensor.cuh"

// adam_mode 0 (PyTorch's AdamW): w -= w*lr*wd; moments; w -= lr*m / (c1 * (sqrt(v/c2) + eps)).
// adam_mode 1 (Hugging Face's): moments; w -= lr_corrected*m / (sqrt(v) + eps); w -= lr*wd*w,
// with lr_corrected = lr * sqrt(c2) / c1 and c1, c2 the bias corrections (1 without them).
template <typename T>
__device__ void ort_adamw_impl(const int64_t* table, int64_t tensors, int64_t chunk, const T* learning_rate,
                               const int64_t* step, acc_t<T> alpha, acc_t<T> beta, acc_t<T> eps,
                               acc_t<T> weight_decay, int correct_bias, int adam_mode) {
    typedef acc_t<T> A;
    const A lr = to_acc<T>(learning_rate[0]);
    const A alpha_correction = correct_bias ? A(1) - (A)pow((double)alpha, (double)step[0]) : A(1);
    const A beta_correction = correct_bias ? A(1) - (A)pow((double)beta, (double)step[0]) : A(1);
    const A lr_corrected = lr * (sqrt(beta_correction) / alpha_correction);
    const Chunk c = block_chunk(table, tensors, chunk);
    T* w = column<T>(c, 0);
    const T* g = column<const T>(c, 1);
    T* m = column<T>(c, 2);
    T* v = column<T>(c, 3);
    for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
        A wi = to_acc<T>(w[i]);
        const A gi = to_acc<T>(g[i]);
        if (adam_mode == 0) wi = wi - wi * lr * weight_decay;
        const A mi = alpha * to_acc<T>(m[i]) + (A(1) - alpha) * gi;
        const A vi = beta * to_acc<T>(v[i]) + (A(1) - beta) * gi * gi;
        if (adam_mode == 0) {
            wi = wi - (lr * mi) / (alpha_correction * (sqrt(vi / beta_correction) + eps));
        } else {
            wi = wi - lr_corrected * mi / (sqrt(vi) + eps);
            wi = wi - lr * weight_decay * wi;
        }
        m[i] = from_acc<T>(mi);
        v[i] = from_acc<T>(vi);
        w[i] = from_acc<T>(wi);
    }
}

// w -= lr * g.
template <typename T>
__device__ void ort_sgd_impl(const int64_t* table, int64_t tensors, int64_t chunk, const T* learning_rate) {
    typedef acc_t<T> A;
    const A lr = to_acc<T>(learning_rate[0]);
    const Chunk c = block_chunk(table, tensors, chunk);
    T* w = column<T>(c, 0);
    const T* g = column<const T>(c, 1);
    for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
        w[i] = from_acc<T>(to_acc<T>(w[i]) - lr * to_acc<T>(g[i]));
    }
}

#define ORT_OPTIMIZER(T, S)                                                                              \
    extern "C" __global__ void ort_adamw_##S(const int64_t* table, int64_t tensors, int64_t chunk,       \
                                             const T* lr, const int64_t* step, acc_t<T> alpha,           \
                                             acc_t<T> beta, acc_t<T> eps, acc_t<T> weight_decay,         \
                                             int correct_bias, int adam_mode) {                          \
        ort_adamw_impl<T>(table, tensors, chunk, lr, step, alpha, beta, eps, weight_decay, correct_bias, \
                          adam_mode);                                                                    \
    }                                                                                                    \
    extern "C" __global__ void ort_sgd_##S(const int64_t* table, int64_t tensors, int64_t chunk,         \
                                           const T* lr) {                                                \
        ort_sgd_impl<T>(table, tensors, chunk, lr);                                                      \
    }
MT_FOR_FLOATS(ORT_OPTIMIZER)
