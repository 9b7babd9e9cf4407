// The table of a multi-tensor launch (built by minitrain/providers/cuda/optimizer.py):
// `tensors` rows of TABLE_COLS int64 (the addresses of param, grad, state 1, state 2, and the
// element count), then one (tensor, first element) pair per block; block b works on `chunk`
// elements of its tensor from there.
#pragma once
#include <stdint.h>

#ifndef MT_TABLE_COLS
#error "MT_TABLE_COLS comes from minitrain/providers/cuda/launch.py (nvcc -DMT_TABLE_COLS=...)"
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
