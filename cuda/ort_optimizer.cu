// ONNX Runtime's SGDOptimizerV2 (com.microsoft) over every parameter in one multi-tensor launch
// (multi_tensor.cuh's table), updating the parameters in place.  The learning rate is read from
// device memory, so that a captured optimizer step follows it.  AdamWOptimizer runs on
// optimizer.cu's mt_adam.
#include "common.cuh"
#include "multi_tensor.cuh"

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

#define ORT_OPTIMIZER(T, S)                                                                      \
    extern "C" __global__ void ort_sgd_##S(const int64_t* table, int64_t tensors, int64_t chunk, \
                                           const T* lr) {                                        \
        ort_sgd_impl<T>(table, tensors, chunk, lr);                                              \
    }
MT_FOR_FLOATS(ORT_OPTIMIZER)
