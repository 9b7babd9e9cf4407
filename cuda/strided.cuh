// Strided indexing shared by cuda/layout.cu and cuda/elementwise.cu.
//
// A StridedPlan<K> describes a dense index space of `rank` dims (at most MT_MAX_RANK, sizes
// innermost last) and K operands laid over it with element strides (0 along a broadcast axis,
// negative for a reversed view).  The host collapses dims first (minitrain/providers/cuda/
// layout.py), so rank is usually 1-3.  It travels as a kernel parameter, by value.
#pragma once
#include <stdint.h>

#ifndef MT_MAX_RANK
#error "MT_MAX_RANK comes from minitrain/providers/cuda/launch.py (nvcc -DMT_MAX_RANK=...)"
#endif

template <int K> struct StridedPlan {
    int64_t size[MT_MAX_RANK];
    int64_t stride[K][MT_MAX_RANK];
};

// The K operand offsets of dense index i.  The loop is unrolled over MT_MAX_RANK with a rank
// guard, so the plan's arrays are indexed by constants and stay in parameter space.
template <int K>
__device__ __forceinline__ void strided_offsets(const StridedPlan<K>& p, int rank, int64_t i, int64_t (&off)[K]) {
#pragma unroll
    for (int k = 0; k < K; ++k) off[k] = 0;
#pragma unroll
    for (int d = MT_MAX_RANK - 1; d >= 0; --d) {
        if (d < rank) {
            const int64_t q = i / p.size[d];
            const int64_t r = i - q * p.size[d];
            i = q;
#pragma unroll
            for (int k = 0; k < K; ++k) off[k] += r * p.stride[k][d];
        }
    }
}
