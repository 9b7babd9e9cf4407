// HardSwish and its com.microsoft gradient as functors on the accumulation type, with
// ext/pointwise_activation.pyx's formulas (a comparison with NaN is false); shared by
// cuda/pointwise_activation.cu and cuda/fused.cu.  The members a, b are the pointwise ops'
// two parameters, unused here.
//   hard_swish(x) = x clamp(x / 6 + 1/2, 0, 1)   grad = 0 below -3, dy (x / 3 + 1/2) to 3, dy above
#pragma once
#include "common.cuh"

template <typename A> __device__ __forceinline__ A unit_clamp(A v) { return v < A(0) ? A(0) : (v > A(1) ? A(1) : v); }

template <typename A> struct HardSwish { A a, b; __device__ A operator()(A x) const { return x * unit_clamp(x / A(6) + A(0.5)); } };
template <typename A> struct HardSwishGrad {
    A a, b;
    __device__ A operator()(A dy, A x) const { return x < A(-3) ? A(0) : (x <= A(3) ? dy * (x / A(3) + A(0.5)) : dy); }
};
