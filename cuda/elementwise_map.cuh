// Elementwise maps over flat contiguous buffers, shared by cuda/elementwise.cu and
// cuda/activation.cu: y[i] = f(x[i]) (map1) and y[i] = f(a[i], b[i]) (map2), with f a functor
// on the accumulation type.  When every pointer is 16-byte aligned, each thread moves 16-byte
// packs (float4, 8 halves, 2 doubles) and the last n % pack elements go one by one; otherwise
// the whole range goes one by one.  Launch about ceil(n / pack) threads (grid-stride).  y may
// be a or x itself (in-place accumulation): each element is read before it is written.
#pragma once
#include "common.cuh"

template <typename T> struct alignas(16) Pack { T v[16 / sizeof(T)]; };

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename T, typename F>
__device__ __forceinline__ void map1(const T* x, T* y, int64_t n, F f) {
    constexpr int V = 16 / sizeof(T);
    int64_t done = 0;
    if (aligned16(x) && aligned16(y)) {
        const int64_t packs = n / V;
        GRID_STRIDE_LOOP(p, packs) {
            const Pack<T> px = reinterpret_cast<const Pack<T>*>(x)[p];
            Pack<T> py;
#pragma unroll
            for (int k = 0; k < V; ++k) py.v[k] = from_acc<T>(f(to_acc<T>(px.v[k])));
            reinterpret_cast<Pack<T>*>(y)[p] = py;
        }
        done = packs * V;
    }
    for (int64_t i = done + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x)
        y[i] = from_acc<T>(f(to_acc<T>(x[i])));
}

template <typename T, typename F>
__device__ __forceinline__ void map2(const T* a, const T* b, T* y,
                                     int64_t n, F f) {
    constexpr int V = 16 / sizeof(T);
    int64_t done = 0;
    if (aligned16(a) && aligned16(b) && aligned16(y)) {
        const int64_t packs = n / V;
        GRID_STRIDE_LOOP(p, packs) {
            const Pack<T> pa = reinterpret_cast<const Pack<T>*>(a)[p];
            const Pack<T> pb = reinterpret_cast<const Pack<T>*>(b)[p];
            Pack<T> py;
#pragma unroll
            for (int k = 0; k < V; ++k) py.v[k] = from_acc<T>(f(to_acc<T>(pa.v[k]), to_acc<T>(pb.v[k])));
            reinterpret_cast<Pack<T>*>(y)[p] = py;
        }
        done = packs * V;
    }
    for (int64_t i = done + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x)
        y[i] = from_acc<T>(f(to_acc<T>(a[i]), to_acc<T>(b[i])));
}
