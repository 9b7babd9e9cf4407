// The weight gradients' common frame (conv_gemm1d.cu and conv_gemm1d_tf32.cu): which bm x bn
// tile of dW (out_channels x in_channels * k) a block owns, where its columns read the staged
// window of X, and which chunks of positions its slice sums over.
#pragma once
#include "gemm1d_staging.cuh"

// Block blockIdx.x's tile of dW: rows m0 .. m0 + bm, columns n0 .. n0 + bn (column c * k + t), and
// the channels c_first .. c_first + c_count of X that those columns read.
struct WeightTile {
    int columns, m0, n0, c_first, c_count;
};

__device__ __forceinline__ WeightTile weight_tile(int bm, int bn, LineGeo g) {
    WeightTile w;
    w.columns = g.in_channels * g.k;
    const int column_tiles = (w.columns + bn - 1) / bn;
    w.m0 = (blockIdx.x / column_tiles) * bm;
    w.n0 = (blockIdx.x % column_tiles) * bn;
    w.c_first = w.n0 / g.k;
    w.c_count = min(g.in_channels - 1, (w.n0 + bn - 1) / g.k) - w.c_first + 1;
    return w;
}

// Column col's (c, t) as an offset in the window whose rows (channels from c_first) are `stride`
// apart; columns past the last read the last one's (their sums are never stored).
__device__ __forceinline__ int window_offset(int col, WeightTile w, int stride, LineGeo g) {
    col = min(col, w.columns - 1);
    const int c = col / g.k;
    return (c - w.c_first) * stride + col - c * g.k;
}

// The chunks q in [first, last) of slice blockIdx.y: chunks_per_slice chunks of `chunk` positions,
// numbered over (sample, chunk of the sample's out_len positions); chunk q starts at position
// l0 of sample s (chunk_at).
struct SliceChunks {
    int64_t first, last;
    int per_sample;
};

__device__ __forceinline__ SliceChunks slice_chunks(int64_t samples, int chunks_per_slice, int chunk, LineGeo g) {
    SliceChunks r;
    r.per_sample = (g.out_len + chunk - 1) / chunk;
    r.first = (int64_t)blockIdx.y * chunks_per_slice;
    r.last = min(r.first + chunks_per_slice, samples * r.per_sample);
    return r;
}

__device__ __forceinline__ void chunk_at(int64_t q, SliceChunks r, int chunk, int64_t& s, int& l0) {
    s = q / r.per_sample;
    l0 = (int)(q - s * r.per_sample) * chunk;
}
