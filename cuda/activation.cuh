// The elementwise activations and their com.microsoft gradients as functors on the
// accumulation type, with ext/activation.pyx's formulas (and so its NaN behaviour: a
// comparison with NaN is false); shared by cuda/activation.cu and cuda/fused.cu:
//   relu(x) = x <= 0 ? 0 : x               ReluGrad(dy, x)           = x > 0 ? dy : 0
//   sigmoid(x)                            SigmoidGrad(dy, y)        = dy * y * (1 - y)
//   tanh(x)                               TanhGrad(dy, y)           = dy * (1 - y * y)
//   leaky(x) = x >= 0 ? x : alpha x       LeakyReluGrad(dy, y)      = y > 0 ? dy : alpha dy
//   quick_gelu(x) = x sigmoid(alpha x)    QuickGeluGrad(dy, x)      = dy s (1 + alpha x (1 - s)),
//                                                                     s = sigmoid(alpha x)
#pragma once
#include "common.cuh"

__device__ __forceinline__ float exp_acc(float v) { return expf(v); }
__device__ __forceinline__ double exp_acc(double v) { return exp(v); }
__device__ __forceinline__ float tanh_acc(float v) { return tanhf(v); }
__device__ __forceinline__ double tanh_acc(double v) { return tanh(v); }

// 1 / (1 + exp(-v)) from e = exp(-|v|) <= 1: nothing overflows, very negative v gives 0.
template <typename A> __device__ __forceinline__ A sigmoid(A v) {
    const A e = exp_acc(-fabs(v));
    return (v >= A(0) ? A(1) : e) / (A(1) + e);
}

template <typename A> struct Relu { A alpha; __device__ A operator()(A x) const { return x <= A(0) ? A(0) : x; } };
template <typename A> struct Sigmoid { A alpha; __device__ A operator()(A x) const { return sigmoid(x); } };
template <typename A> struct Tanh { A alpha; __device__ A operator()(A x) const { return tanh_acc(x); } };
template <typename A> struct LeakyRelu {
    A alpha;
    __device__ A operator()(A x) const { return x >= A(0) ? x : alpha * x; }
};
template <typename A> struct QuickGelu {
    A alpha;
    __device__ A operator()(A x) const { return x * sigmoid(alpha * x); }
};

template <typename A> struct ReluGrad { A alpha; __device__ A operator()(A dy, A x) const { return x > A(0) ? dy : A(0); } };
template <typename A> struct SigmoidGrad {
    A alpha;
    __device__ A operator()(A dy, A y) const { return dy * y * (A(1) - y); }
};
template <typename A> struct TanhGrad { A alpha; __device__ A operator()(A dy, A y) const { return dy * (A(1) - y * y); } };
template <typename A> struct LeakyReluGrad {
    A alpha;
    __device__ A operator()(A dy, A y) const { return y > A(0) ? dy : alpha * dy; }
};
template <typename A> struct QuickGeluGrad {
    A alpha;
    __device__ A operator()(A dy, A x) const {
        const A s = sigmoid(alpha * x);
        return dy * s * (A(1) + alpha * x * (A(1) - s));
    }
};
