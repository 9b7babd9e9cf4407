// Implicit-GEMM 1-D convolutions (one group, unit stride and dilation) for moderate channel
// counts, every product accumulated in registers from tiles staged in shared memory.
//
// A "line" convolution maps a source (N, in_channels, in_len) to a destination
// (N, out_channels, out_len): destination position l reads source positions l - pad + t for taps
// t < k (zero outside the source).  The forward is one with the weight (out, in, k); the data
// gradient is one from dY to dX with the weight read transposed and flipped (FLIP) and
// pad = k - 1 - pad_begin.  As a GEMM: M = out_channels, N = N * out_len, K = in_channels * k.
//
//   * gemm1d_forward / gemm1d_data: a block of 32 x blockDim.y threads owns TILE * blockDim.y
//     output channels by SPAN = 32 * TILE positions of one sample; each thread TILE channels by
//     TILE positions 32 apart (so a warp's loads and stores are consecutive).  Per chunk of
//     input channels the block stages the source window (SPAN + k - 1 values a channel, halo
//     included) and the weights (tap-major, channels contiguous), then every thread takes
//     TILE x TILE products per (channel, tap); the epilogue adds the bias and applies the
//     fused activation (activation.cuh's code, -1 for none) that FusedConv asks for.
//   * gemm1d_weight: dW (M = out_channels, N = in_channels * k) summed over K = the (sample,
//     position) pairs, cut into slices of chunks of positions (a multiple of 32 that the launch
//     sizes to the shared memory), one slice per blockIdx.y; a block
//     of (bn / TILE, bm / TILE, layers) threads owns a bm x bn tile of dW, stages a chunk's dY rows
//     and the window of X its columns read, and its `layers` take every layers-th position; the
//     layers then add up in a fixed order and the slices are summed by conv.cu's sum_slices.
//     No atomics: deterministic.
// Every tile is staged with all its loads in flight (cp.async for float and double; batches of
// STAGE_BATCH loads for the 16-bit types), so a block waits about one memory latency per tile
// rather than one per element it stages.
#include "common.cuh"
#include "activation.cuh"
#include "gemm1d_staging.cuh"
#include "gemm1d_weight.cuh"

#ifndef MT_GEMM1D_TILE
#error "MT_GEMM1D_TILE comes from minitrain/providers/cuda/launch.py (nvcc -DMT_GEMM1D_TILE=...)"
#endif
#define TILE MT_GEMM1D_TILE
#define LANES 32
#define SPAN (LANES * TILE)

// v = p[0 .. TILE) from shared memory; p is 16-byte aligned (float4 loads for float).
template <typename A>
__device__ __forceinline__ void load_tile(const A* p, A (&v)[TILE]) {
#pragma unroll
    for (int i = 0; i < TILE; ++i) v[i] = p[i];
}
template <>
__device__ __forceinline__ void load_tile<float>(const float* p, float (&v)[TILE]) {
#pragma unroll
    for (int i = 0; i < TILE; i += 4) {
        const float4 q = *reinterpret_cast<const float4*>(p + i);
        v[i] = q.x;
        v[i + 1] = q.y;
        v[i + 2] = q.z;
        v[i + 3] = q.w;
    }
}

template <typename A>
__device__ __forceinline__ void outer_product(A (&acc)[TILE][TILE], const A (&a)[TILE], const A (&b)[TILE]) {
#pragma unroll
    for (int i = 0; i < TILE; ++i)
#pragma unroll
        for (int j = 0; j < TILE; ++j) acc[i][j] += a[i] * b[j];
}

// dst[s, o, l] = act(bias[o] + sum over (c, t) of weight(o, c, t) * src[s, c, l - pad + t]),
// where weight(o, c, t) = w[o, c, t], or w[c, o, k - 1 - t] when FLIP; act: activate(code, .,
// alpha, beta), none when code < 0.  Grid: (N * tiles, channel tiles).
template <typename T, bool FLIP>
__device__ void gemm1d_line_impl(const T* src, const T* w, const T* bias, T* dst, int tiles, int has_bias, int chunk,
                                 int code, acc_t<T> alpha, acc_t<T> beta, LineGeo g) {
    typedef acc_t<T> A;
    extern __shared__ __align__(16) unsigned char gemm1d_shared[];
    const int bm = blockDim.y * TILE, width = SPAN + g.k - 1;
    A* ws = reinterpret_cast<A*>(gemm1d_shared);     // [chunk * k][bm]
    A* xs = ws + chunk * g.k * bm;                   // [chunk][width]
    const int64_t sample = blockIdx.x / tiles;
    const int l0 = (int)(blockIdx.x % tiles) * SPAN, m0 = blockIdx.y * bm, row = threadIdx.y * TILE;
    const int tid = threadIdx.y * LANES + threadIdx.x, threads = LANES * blockDim.y;
    A acc[TILE][TILE];
#pragma unroll
    for (int i = 0; i < TILE; ++i) {
        const int o = m0 + row + i;
        const A start = has_bias && o < g.out_channels ? to_acc(bias[o]) : A(0);
#pragma unroll
        for (int j = 0; j < TILE; ++j) acc[i][j] = start;
    }
    const T* in = src + sample * g.in_channels * (int64_t)g.in_len;
    for (int c0 = 0; c0 < g.in_channels; c0 += chunk) {
        const int cc = min(chunk, g.in_channels - c0);
        __syncthreads();    // the previous chunk's readers are done
        const T* lines = in + (int64_t)c0 * g.in_len;
        stage(xs, cc, width, tid, threads, src,
              [&](int c, int j) -> const T* {
                  const int x = l0 - g.pad + j;
                  return x >= 0 && x < g.in_len ? lines + (int64_t)c * g.in_len + x : nullptr;
              },
              [&](int c, int j) { return c * width + j; });
        stage(ws, cc * g.k, bm, tid, threads, src,
              [&](int r, int m) -> const T* {
                  const int o = m0 + m;
                  if (o >= g.out_channels) return nullptr;
                  if (!FLIP) return w + (int64_t)o * g.in_channels * g.k + c0 * g.k + r;
                  const int c = r / g.k, t = r - c * g.k;
                  return w + ((int64_t)(c0 + c) * g.out_channels + o) * g.k + g.k - 1 - t;
              },
              [&](int r, int m) { return r * bm + m; });
        copies_done();
        __syncthreads();
        for (int c = 0; c < cc; ++c) {
            const A* wc = ws + c * g.k * bm + row;
            const A* xc = xs + c * width + threadIdx.x;
            for (int t = 0; t < g.k; ++t) {
                A a[TILE], b[TILE];
                load_tile(wc + t * bm, a);
#pragma unroll
                for (int j = 0; j < TILE; ++j) b[j] = xc[t + j * LANES];
                outer_product(acc, a, b);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < TILE; ++i) {
        const int o = m0 + row + i;
        if (o >= g.out_channels) break;
        T* out = dst + (sample * g.out_channels + o) * (int64_t)g.out_len;
#pragma unroll
        for (int j = 0; j < TILE; ++j) {
            const int l = l0 + threadIdx.x + j * LANES;
            if (l < g.out_len) out[l] = from_acc<T>(code < 0 ? acc[i][j] : activate(code, acc[i][j], alpha, beta));
        }
    }
}

// part[slice, o, c * k + t] = the sum over the positions of `slice` (chunks_per_slice chunks of
// `chunk` positions of one sample each) of dy[s, o, l] * x[s, c, l - pad + t]; g is the forward's
// (in: x, out: dy).  A chunk stages dY's rows position-major and the X window of the tile's
// channels (chunk + k - 1 positions each, once, not k times as im2col rows would); a thread
// reads its TILE columns (c, t), blockDim.x apart, from the window at offsets fixed for the
// block.  Window rows are chunk + k apart: chunk being a multiple of 32, column c * k + t then
// sits in bank (c * k + t + p) % 32, so a warp's neighbouring columns never share a bank.
// Grid: (channel tiles * column tiles, slices).
template <typename T>
__device__ void gemm1d_weight_impl(const T* dy, const T* x, acc_t<T>* part, int64_t samples, int chunks_per_slice,
                                   int chunk, LineGeo g) {
    typedef acc_t<T> A;
    extern __shared__ __align__(16) unsigned char gemm1d_shared[];
    const int bn = blockDim.x * TILE, bm = blockDim.y * TILE, layers = blockDim.z;
    const int lda = bm + 4;                          // dY rows stay 16-byte aligned
    const int stride = chunk + g.k;
    const WeightTile tile = weight_tile(bm, bn, g);
    const int columns = tile.columns, m0 = tile.m0, n0 = tile.n0;
    A* as = reinterpret_cast<A*>(gemm1d_shared);     // [chunk][lda]
    A* xs = as + chunk * lda;                        // [c_count][stride]
    int offset[TILE];                                // column n0 + threadIdx.x + j * blockDim.x's (c, t) in the window
#pragma unroll
    for (int j = 0; j < TILE; ++j) offset[j] = window_offset(n0 + (int)threadIdx.x + j * (int)blockDim.x, tile, stride, g);
    const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y * layers;
    A acc[TILE][TILE];
#pragma unroll
    for (int i = 0; i < TILE; ++i)
#pragma unroll
        for (int j = 0; j < TILE; ++j) acc[i][j] = A(0);
    const SliceChunks slice = slice_chunks(samples, chunks_per_slice, chunk, g);
    for (int64_t q = slice.first; q < slice.last; ++q) {
        int64_t s;
        int l0;
        chunk_at(q, slice, chunk, s, l0);
        __syncthreads();    // the previous chunk's readers are done
        stage_weight_chunk(dy, x, as, xs, s, l0, m0, bm, chunk, tile.c_first, tile.c_count, stride, tid, threads, g,
                           [&](int m, int p) { return p * lda + m; });
        copies_done();
        __syncthreads();
        for (int p = threadIdx.z; p < chunk; p += layers) {
            A a[TILE], b[TILE];
            load_tile(as + p * lda + threadIdx.y * TILE, a);
#pragma unroll
            for (int j = 0; j < TILE; ++j) b[j] = xs[offset[j] + p];
            outer_product(acc, a, b);
        }
    }
    A* red = reinterpret_cast<A*>(gemm1d_shared);    // [bm][bn], once the chunks are done
    const int cell = threadIdx.y * TILE * bn + threadIdx.x * TILE;
    for (int z = 1; z < layers; ++z) {
        __syncthreads();
        if (threadIdx.z == z)
#pragma unroll
            for (int i = 0; i < TILE; ++i)
#pragma unroll
                for (int j = 0; j < TILE; ++j) red[cell + i * bn + j] = acc[i][j];
        __syncthreads();
        if (threadIdx.z == 0)
#pragma unroll
            for (int i = 0; i < TILE; ++i)
#pragma unroll
                for (int j = 0; j < TILE; ++j) acc[i][j] += red[cell + i * bn + j];
    }
    if (threadIdx.z != 0) return;
    acc_t<T>* out = part + (int64_t)blockIdx.y * g.out_channels * columns;
#pragma unroll
    for (int i = 0; i < TILE; ++i) {
        const int o = m0 + threadIdx.y * TILE + i;
        if (o >= g.out_channels) break;
#pragma unroll
        for (int j = 0; j < TILE; ++j) {
            const int col = n0 + threadIdx.x + j * blockDim.x;
            if (col < columns) out[(int64_t)o * columns + col] = acc[i][j];
        }
    }
}

#define GEMM1D_KERNELS(T, S)                                                                                      \
    extern "C" __global__ void gemm1d_forward_##S(const T* src, const T* w, const T* bias, T* dst, int tiles,      \
                                                  int has_bias, int chunk, int code, acc_t<T> alpha, acc_t<T> beta, LineGeo g) { \
        gemm1d_line_impl<T, false>(src, w, bias, dst, tiles, has_bias, chunk, code, alpha, beta, g);                   \
    }                                                                                                             \
    extern "C" __global__ void gemm1d_data_##S(const T* src, const T* w, const T* bias, T* dst, int tiles,         \
                                               int has_bias, int chunk, int code, acc_t<T> alpha, acc_t<T> beta, LineGeo g) { \
        gemm1d_line_impl<T, true>(src, w, bias, dst, tiles, has_bias, chunk, code, alpha, beta, g);                    \
    }                                                                                                             \
    extern "C" __global__ void gemm1d_weight_##S(const T* dy, const T* x, acc_t<T>* part, int64_t samples,        \
                                                 int chunks_per_slice, int chunk, LineGeo g) {                   \
        gemm1d_weight_impl<T>(dy, x, part, samples, chunks_per_slice, chunk, g);                                  \
    }
MT_FOR_FLOATS(GEMM1D_KERNELS)
