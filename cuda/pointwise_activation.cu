// The pointwise activations of exported CNNs and their com.microsoft gradients (dY, X -> dX),
// as functors on the accumulation type with ext/pointwise_activation.pyx's
// formulas (a comparison with NaN is false, so NaN takes the same branch on both), over flat
// buffers in 16-byte packs (elementwise_map.cuh).  Each op takes two parameters a and b: alpha
// and beta (HardSigmoid), alpha and gamma (Selu), alpha (Elu), none (the others).
//   hard_sigmoid(x) = clamp(a x + b, 0, 1)        grad = a dy where 0 < a x + b < 1
//   hard_swish(x)   = x clamp(x / 6 + 1/2, 0, 1)  grad = 0 below -3, dy (x / 3 + 1/2) to 3, dy above
//   softplus(x)     = max(x, 0) + log1p(exp(-|x|)) grad = dy sigmoid(x)
//   elu(x)          = x > 0 ? x : a expm1(x)      grad = x > 0 ? dy : dy a exp(x)
//   selu(x)         = b elu_a(x)                  grad = b elu_a'(x) dy
//   gelu(x)         = x Phi(x)                    grad = dy (Phi(x) + x phi(x))
//   fast_gelu(x)    = x (1 + tanh(u)) / 2 = x sigmoid(2u), u = K (x + C x^3), K = sqrt(2 / pi),
//                     C = 0.044715               grad = dy (s + 2 x s (1 - s) u'(x)), s = sigmoid(2u)
// bias_gelu(x, b) is gelu(x + b) for a bias b of x's last dim (c elements), its grad gelu's at x + b.
#include "common.cuh"
#include "elementwise_map.cuh"
#include "hard_swish.cuh"
#include "math_acc.cuh"

#define GELU_TANH_SCALE 0.7978845608028654
#define GELU_TANH_CUBIC 0.044715
#define SQRT_HALF 0.7071067811865476
#define INV_SQRT_2PI 0.3989422804014327

template <typename A> struct HardSigmoid { A a, b; __device__ A operator()(A x) const { return unit_clamp(a * x + b); } };
template <typename A> struct HardSigmoidGrad {
    A a, b;
    __device__ A operator()(A dy, A x) const {
        const A v = a * x + b;
        return v > A(0) && v < A(1) ? a * dy : A(0);
    }
};
template <typename A> struct Softplus {
    A a, b;
    __device__ A operator()(A x) const { return (x > A(0) ? x : A(0)) + log1p_acc(exp_acc(-fabs(x))); }
};
template <typename A> struct SoftplusGrad { A a, b; __device__ A operator()(A dy, A x) const { return dy * sigmoid(x); } };
template <typename A> struct Elu { A a, b; __device__ A operator()(A x) const { return x > A(0) ? x : a * expm1_acc(x); } };
template <typename A> struct EluGrad {
    A a, b;
    __device__ A operator()(A dy, A x) const { return x > A(0) ? dy : dy * (a * exp_acc(x)); }
};
template <typename A> struct Selu { A a, b; __device__ A operator()(A x) const { return b * (x > A(0) ? x : a * expm1_acc(x)); } };
template <typename A> struct SeluGrad {
    A a, b;
    __device__ A operator()(A dy, A x) const { return b * (x > A(0) ? dy : dy * (a * exp_acc(x))); }
};
template <typename A> struct Gelu {
    A a, b;
    __device__ A operator()(A x) const { return A(0.5) * x * (A(1) + erf_acc(x * A(SQRT_HALF))); }
};
template <typename A> struct GeluGrad {
    A a, b;
    __device__ A operator()(A dy, A x) const {
        return dy * (A(0.5) * (A(1) + erf_acc(x * A(SQRT_HALF))) + x * (A(INV_SQRT_2PI) * exp_acc(A(-0.5) * x * x)));
    }
};
// (1 + tanh(u)) / 2 = sigmoid(2u), u = K (x + C x^3): as a sigmoid it keeps its precision
// where tanh(u) rounds to -1.
template <typename A> __device__ __forceinline__ A gelu_tanh_s(A x) {
    return sigmoid(A(2 * GELU_TANH_SCALE) * (x + A(GELU_TANH_CUBIC) * x * x * x));
}
template <typename A> struct FastGelu { A a, b; __device__ A operator()(A x) const { return x * gelu_tanh_s(x); } };
template <typename A> struct FastGeluGrad {
    A a, b;
    __device__ A operator()(A dy, A x) const {
        const A s = gelu_tanh_s(x);
        const A du = A(GELU_TANH_SCALE) * (A(1) + A(3 * GELU_TANH_CUBIC) * x * x);
        return dy * (s + A(2) * x * s * (A(1) - s) * du);
    }
};

#define POINTWISE(T, S, NAME, OP)                                                                   \
    extern "C" __global__ void NAME##_##S(const T* x, T* y, int64_t n, acc_t<T> a, acc_t<T> b) {   \
        map1<T>(x, y, n, OP<acc_t<T>>{a, b});                                                       \
    }                                                                                               \
    extern "C" __global__ void NAME##_grad_##S(const T* dy, const T* x, T* dx, int64_t n, acc_t<T> a, \
                                               acc_t<T> b) {                                        \
        map2<T>(dy, x, dx, n, OP##Grad<acc_t<T>>{a, b});                                            \
    }
#define POINTWISE_ACTIVATIONS(T, S)                                                                 \
    POINTWISE(T, S, hard_sigmoid, HardSigmoid) POINTWISE(T, S, hard_swish, HardSwish)               \
    POINTWISE(T, S, softplus, Softplus) POINTWISE(T, S, elu, Elu) POINTWISE(T, S, selu, Selu)        \
    POINTWISE(T, S, gelu, Gelu) POINTWISE(T, S, fast_gelu, FastGelu)
MT_FOR_FLOATS(POINTWISE_ACTIVATIONS)

#define BIAS_GELU(T, S)                                                                             \
    extern "C" __global__ void bias_gelu_##S(const T* x, const T* bias, T* y, int64_t n, int64_t c) { \
        GRID_STRIDE_LOOP(i, n) {                                                                    \
            y[i] = from_acc<T>(Gelu<acc_t<T>>{}(to_acc(x[i]) + to_acc(bias[i % c])));              \
        }                                                                                           \
    }                                                                                               \
    extern "C" __global__ void bias_gelu_grad_##S(const T* dy, const T* x, const T* bias, T* dx,     \
                                                  int64_t n, int64_t c) {                           \
        GRID_STRIDE_LOOP(i, n) {                                                                    \
            dx[i] = from_acc<T>(GeluGrad<acc_t<T>>{}(to_acc(dy[i]), to_acc(x[i]) + to_acc(bias[i % c]))); \
        }                                                                                           \
    }
MT_FOR_FLOATS(BIAS_GELU)
