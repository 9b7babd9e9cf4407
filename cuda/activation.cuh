// The elementwise activations and their com.microsoft gradients as functors on the
// accumulation type, with ext/activation.pyx's formulas (and so its NaN behaviour: a
// comparison with NaN is false); shared by cuda/activation.cu, cuda/fused.cu and
// cuda/conv_gemm1d.cu:
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

// min(max(x, low), high), as Clip's kernel (math_extra.cu): NaN stays NaN.
template <typename A> struct ClipBounds {
    A low, high;
    __device__ A operator()(A x) const {
        const A v = x < low ? low : x;
        return v > high ? high : v;
    }
};

// The fused ops' activation as a run-time code (providers/cuda/fused.py's ACTIVATION_CODES):
// 0 Relu, 1 Sigmoid, 2 Tanh, 3 LeakyRelu (alpha), 4 Clip (bounds alpha and beta); shared by
// cuda/fused.cu and the convolution epilogues.
template <typename A> __device__ __forceinline__ A activate(int code, A x, A alpha, A beta) {
    switch (code) {
        case 0: return Relu<A>{alpha}(x);
        case 1: return Sigmoid<A>{alpha}(x);
        case 2: return Tanh<A>{alpha}(x);
        case 3: return LeakyRelu<A>{alpha}(x);
        default: return ClipBounds<A>{alpha, beta}(x);
    }
}

// A convolution epilogue's activation: none for code -1.
template <typename A> __device__ __forceinline__ A activate_or_keep(int code, A x, A alpha, A beta) {
    return code < 0 ? x : activate(code, x, alpha, beta);
}

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
