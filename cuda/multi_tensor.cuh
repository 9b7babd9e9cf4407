// The table of a multi-tensor launch (built by minitrain/providers/cuda/optimizer.py):
// `tensors` rows of TABLE_COLS int64 (the addresses of param, grad, state 1, state 2, the
// element count, and the gradient's type: 0 for the parameter's own, MT_GRAD_HALF or
// MT_GRAD_BF16 for a 16-bit gradient of a float32 parameter), then one (tensor, first element)
// pair per block; block b works on `chunk` elements of its tensor from there.
#pragma once
#include <stdint.h>
#include <type_traits>

#include "common.cuh"

#ifndef MT_TABLE_COLS
#error "MT_TABLE_COLS comes from minitrain/providers/cuda/launch.py (nvcc -DMT_TABLE_COLS=...)"
#endif
#ifndef MT_GRAD_HALF
#error "MT_GRAD_HALF comes from minitrain/providers/cuda/launch.py (nvcc -DMT_GRAD_HALF=...)"
#endif
#ifndef MT_GRAD_BF16
#error "MT_GRAD_BF16 comes from minitrain/providers/cuda/launch.py (nvcc -DMT_GRAD_BF16=...)"
#endif
#define TABLE_COLS MT_TABLE_COLS

struct Chunk {
    const int64_t* row;     // param, grad, state 1, state 2, count
    int64_t tensor;         // the row's index: the parameter's place in per-parameter settings
    int64_t begin, end;
};

__device__ __forceinline__ Chunk block_chunk(const int64_t* table, int64_t tensors, int64_t chunk) {
    const int64_t* pair = table + TABLE_COLS * tensors + 2 * (int64_t)blockIdx.x;
    Chunk c;
    c.tensor = pair[0];
    c.row = table + TABLE_COLS * pair[0];
    c.begin = pair[1];
    c.end = min(c.row[4], pair[1] + chunk);
    return c;
}

template <typename T> __device__ __forceinline__ T* column(const Chunk& c, int k) {
    return reinterpret_cast<T*>(c.row[k]);
}

// Calls body(g) with `gradient` as a pointer of its own element type: T's (type 0), or for
// float32 parameters a float16 (MT_GRAD_HALF) or bfloat16 (MT_GRAD_BF16) gradient, which body
// reads through to_acc, widening each element exactly.  The branch is uniform over the grid.
template <typename T, typename Body>
__device__ __forceinline__ void with_gradient_type(const void* gradient, int64_t type, Body body) {
    if constexpr (std::is_same<T, float>::value) {
        if (type == MT_GRAD_HALF) return body(static_cast<const __half*>(gradient));
        if (type == MT_GRAD_BF16) return body(static_cast<const __nv_bfloat16*>(gradient));
    }
    body(static_cast<const T*>(gradient));
}

// with_gradient_type on the chunk's gradient, of the type its row names.
template <typename T, typename Body> __device__ __forceinline__ void with_gradient(const Chunk& c, Body body) {
    with_gradient_type<T>(column<const void>(c, 1), c.row[5], body);
}
