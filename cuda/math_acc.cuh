// Math functions on the accumulation type (float for float and half, double for double), for
// the elementwise kernels of cuda/pointwise_activation.cu, cuda/math_extra.cu and
// cuda/reduce_norm.cu; exp_acc, tanh_acc and sigmoid come from activation.cuh.
#pragma once
#include "common.cuh"
#include "activation.cuh"

__device__ __forceinline__ float log_acc(float v) { return logf(v); }
__device__ __forceinline__ double log_acc(double v) { return log(v); }
__device__ __forceinline__ float sqrt_acc(float v) { return sqrtf(v); }
__device__ __forceinline__ double sqrt_acc(double v) { return sqrt(v); }
__device__ __forceinline__ float erf_acc(float v) { return erff(v); }
__device__ __forceinline__ double erf_acc(double v) { return erf(v); }
__device__ __forceinline__ float expm1_acc(float v) { return expm1f(v); }
__device__ __forceinline__ double expm1_acc(double v) { return expm1(v); }
__device__ __forceinline__ float log1p_acc(float v) { return log1pf(v); }
__device__ __forceinline__ double log1p_acc(double v) { return log1p(v); }
__device__ __forceinline__ float pow_acc(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double pow_acc(double a, double b) { return pow(a, b); }
