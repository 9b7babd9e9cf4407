// Shared by every cuda/*.cu: element types, accumulation types and the instantiation macro.
//
// Kernels are templates on the element type T; they compute in acc_t<T> (float for __half and
// __nv_bfloat16, T otherwise) and are instantiated for the four element types as extern "C"
// kernels named <name>_f16, <name>_bf16, <name>_f32 and <name>_f64, the names
// minitrain/providers/cuda/compiler.py loads.
//
// A kernel reads and writes T through to_acc and from_acc and computes in acc_t<T>.  The
// 16-bit types' own operators and implicit conversions are switched off below, so that a
// kernel that would add or compare in half or bfloat16 precision (rounding every step to 11 or
// 8 bits) fails to compile instead; copying a T and the explicit intrinsics remain.  This
// header must come before any other CUDA header in a .cu file for the switches to apply.
#pragma once
#define __CUDA_NO_HALF_OPERATORS__
#define __CUDA_NO_HALF_CONVERSIONS__
#define __CUDA_NO_HALF2_OPERATORS__
#define __CUDA_NO_BFLOAT16_OPERATORS__
#define __CUDA_NO_BFLOAT16_CONVERSIONS__
#define __CUDA_NO_BFLOAT162_OPERATORS__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

template <typename T> struct acc_type { typedef T type; };
template <> struct acc_type<__half> { typedef float type; };
template <> struct acc_type<__nv_bfloat16> { typedef float type; };
template <typename T> using acc_t = typename acc_type<T>::type;

template <typename T> __device__ __forceinline__ acc_t<T> to_acc(T x) { return x; }
template <> __device__ __forceinline__ float to_acc<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_acc<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_acc(acc_t<T> x) { return x; }
template <> __device__ __forceinline__ __half from_acc<__half>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float x) { return __float2bfloat16(x); }

// Each index i in [0, n) once, over however many blocks the launch has.
#define GRID_STRIDE_LOOP(i, n)                                                             \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (int64_t)(n);     \
         i += (int64_t)blockDim.x * gridDim.x)

// i = p * n + q: 32-bit division whenever i allows it.
__device__ __forceinline__ void split_index(int64_t i, int n, int64_t& p, int& q) {
    if (i <= INT32_MAX) {
        const unsigned u = (unsigned)i, v = u / (unsigned)n;
        p = v;
        q = (int)(u - v * (unsigned)n);
    } else {
        p = i / n;
        q = (int)(i - p * n);
    }
}

// MT_FOR_FLOATS(M) expands M(T, suffix) for the four element types: a .cu file defines a
// macro that writes one extern "C" __global__ wrapper calling its template, then passes it here.
#define MT_FOR_FLOATS(M) M(__half, f16) M(__nv_bfloat16, bf16) M(float, f32) M(double, f64)
