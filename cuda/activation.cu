// Elementwise activations and their com.microsoft gradients (the functors of activation.cuh),
// computed in the accumulation type, over flat buffers in 16-byte packs (elementwise_map.cuh).
#include "common.cuh"
#include "activation.cuh"
#include "elementwise_map.cuh"

#define ACTIVATION(T, S, NAME, OP)                                                                  \
    extern "C" __global__ void NAME##_##S(const T* x, T* y, int64_t n, acc_t<T> alpha) {            \
        map1<T>(x, y, n, OP<acc_t<T>>{alpha});                                                      \
    }                                                                                               \
    extern "C" __global__ void NAME##_grad_##S(const T* dy, const T* v, T* dx, int64_t n, acc_t<T> alpha) { \
        map2<T>(dy, v, dx, n, OP##Grad<acc_t<T>>{alpha});                                           \
    }
#define ACTIVATIONS(T, S)                                                                           \
    ACTIVATION(T, S, relu, Relu) ACTIVATION(T, S, sigmoid, Sigmoid) ACTIVATION(T, S, tanh, Tanh)    \
    ACTIVATION(T, S, leaky_relu, LeakyRelu) ACTIVATION(T, S, quick_gelu, QuickGelu)
MT_FOR_FLOATS(ACTIVATIONS)
