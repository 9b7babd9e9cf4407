// N adjacent elements moved in one load or store, for kernels whose rows allow it (cuda/pool.cu,
// cuda/fused.cu): Lanes<T, N> is aligned to its own size, so a pointer to one must be too
// (aligned_to).  VEC<T> elements make 16 bytes: a float4, two doubles, eight halves.
#pragma once
#include "common.cuh"

template <typename T, int N> struct alignas(sizeof(T) * N) Lanes { T v[N]; };

template <typename T> __host__ __device__ constexpr int vec_width() { return (int)(16 / sizeof(T)); }

__device__ __forceinline__ bool aligned_to(const void* p, int bytes) {
    return (reinterpret_cast<uintptr_t>(p) & (uintptr_t)(bytes - 1)) == 0;
}

// The N elements at p + k * N (p aligned to N elements).
template <typename T, int N> __device__ __forceinline__ Lanes<T, N> load_lanes(const T* p, int64_t k) {
    return reinterpret_cast<const Lanes<T, N>*>(p)[k];
}
template <typename T, int N> __device__ __forceinline__ void store_lanes(T* p, int64_t k, const Lanes<T, N>& v) {
    reinterpret_cast<Lanes<T, N>*>(p)[k] = v;
}
