// Implicit-GEMM 1-D convolutions on TF32 tensor cores (float32 data, sm_80 and newer): the
// primitives of conv_gemm1d.cu (one group, unit stride and dilation) with the products taken by
// warp-level mma.sync m16n8k8 (TF32 inputs rounded to nearest by cvt.rna, FP32 accumulation).
//
// A "line" convolution maps a source (N, in_channels, in_len) to a destination
// (N, out_channels, out_len): destination position l reads source positions l - pad + t for taps
// t < k (zero outside the source).  The forward is one with the weight (out, in, k); the data
// gradient is one from dY to dX with the weight read transposed and flipped (FLIP) and
// pad = k - 1 - pad_begin.
//
// mma.m16n8k8 (.tf32): lane = 4 g + t4 holds A (16 x 8, M x K) at (g, t4), (g + 8, t4),
// (g, t4 + 4), (g + 8, t4 + 4); B (8 x 8, K x N) at (t4, g), (t4 + 4, g); C (16 x 8) at
// (g, 2 t4), (g, 2 t4 + 1), (g + 8, 2 t4), (g + 8, 2 t4 + 1).  A warp owns MT x NT such tiles.
//
//   * gemm1d_tf32_forward / _data: M = out_channels, N = positions of one sample, K = in_channels
//     x k (the index c * k + t).  A block of (32, warps_n, warps_m) threads owns bm = warps_m *
//     16 MT channels by bn = warps_n * 8 NT positions.  Per chunk of input channels it stages the
//     source window (bn + k - 1 values a channel, halo included; the im2col B operand is read
//     from it at offset t, never built), the weights K-major (rows c * k + t, up to a multiple
//     of 8, the padding rows zero) and a table of each K row's window offset c * width + t (the
//     padding rows point at a row of zeros).  The epilogue adds the bias and applies the fused
//     activation (activation.cuh's code, -1 for none).
//   * gemm1d_tf32_forward_pipe / _data_pipe: the same products, for weights that fit a block
//     whole: the block converts its rows of the weight to TF32 fragments once, then strides over
//     position tiles with a ring of 2 or 3 source windows, the next tiles' copies in flight
//     while the warps multiply (line_pipe_impl).
//   * gemm1d_tf32_weight: dW (M = out_channels, N = in_channels * k) summed over K = the
//     (sample, position) pairs, cut into slices of chunks of positions (a multiple of 32), one
//     slice per blockIdx.y; a block of (32, warps, layers) threads owns a bm x bn tile of dW
//     (warps = warps_m x warps_n), stages a chunk's dY rows and the window of X its columns
//     read into a ring of 2 or 3 chunk buffers (the next chunks' copies in flight while the
//     warps multiply), and its `layers` take every layers-th k-step of 8 positions; the layers
//     then add up in a fixed order and the slices are summed by conv.cu's sum_slices.  No
//     atomics: deterministic.
// Every tile is staged by cp.async with all its copies in flight.
#include "common.cuh"
#include "activation.cuh"
#include "gemm1d_staging.cuh"
#include "gemm1d_weight.cuh"

#ifndef MT_GEMM1D_TF32_LINE_NT
#error "MT_GEMM1D_TF32_LINE_NT comes from minitrain/providers/cuda/launch.py (nvcc -DMT_GEMM1D_TF32_LINE_NT=...)"
#endif
#define LINE_NT MT_GEMM1D_TF32_LINE_NT    // n-tiles of a forward / data warp
#define PIPE_NT 4                         // n-tiles of a pipelined forward / data warp
#define LANES 32
#define MMA_M 16
#define MMA_N 8
#define MMA_K 8

__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned u;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(u) : "f"(x));
    return u;
}

// c += a (16 x 8) . b (8 x 8), fragments as in the header.
__device__ __forceinline__ void mma_tf32(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ int round_up8(int v) { return (v + MMA_K - 1) / MMA_K * MMA_K; }

// dst[s, o, l] = act(bias[o] + sum over (c, t) of weight(o, c, t) * src[s, c, l - pad + t]),
// where weight(o, c, t) = w[o, c, t], or w[c, o, k - 1 - t] when FLIP; act: activate(code, .,
// alpha, beta), none when code < 0.  Grid: (N * tiles, channel tiles).  Shared memory: the
// weights [round_up8(chunk * k)][bm + 8] (rows 8 banks apart, so a fragment's 32 loads hit 32
// banks), the window [chunk][bn + k - 1] and a row of bn zeros, the offsets [round_up8(chunk * k)].
template <int MT, bool FLIP>
__device__ void line_impl(const float* src, const float* w, const float* bias, float* dst, int tiles, int has_bias,
                          int chunk, int code, float alpha, float beta, LineGeo g) {
    extern __shared__ __align__(16) unsigned char gemm1d_tf32_shared[];
    const int bm = blockDim.z * MT * MMA_M, bn = blockDim.y * LINE_NT * MMA_N;
    const int lda = bm + 8, width = bn + g.k - 1, rows = round_up8(chunk * g.k), zeros = chunk * width;
    float* ws = reinterpret_cast<float*>(gemm1d_tf32_shared);     // [rows][lda]
    float* xs = ws + rows * lda;                                   // [chunk][width], then bn zeros
    int* offset = reinterpret_cast<int*>(xs + zeros + bn);          // [rows]
    const int64_t sample = blockIdx.x / tiles;
    const int l0 = (int)(blockIdx.x % tiles) * bn, m0 = blockIdx.y * bm;
    const int lane = threadIdx.x, gq = lane >> 2, t4 = lane & 3;
    const int wm = threadIdx.z * MT * MMA_M, wn = threadIdx.y * LINE_NT * MMA_N;
    const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * LANES + lane, threads = LANES * blockDim.y * blockDim.z;
    for (int j = tid; j < bn; j += threads) xs[zeros + j] = 0.f;
    float acc[MT][LINE_NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i) {
        const int o = m0 + wm + i * MMA_M + gq;
        const float top = has_bias && o < g.out_channels ? bias[o] : 0.f;
        const float bottom = has_bias && o + 8 < g.out_channels ? bias[o + 8] : 0.f;
#pragma unroll
        for (int j = 0; j < LINE_NT; ++j) {
            acc[i][j][0] = acc[i][j][1] = top;
            acc[i][j][2] = acc[i][j][3] = bottom;
        }
    }
    const float* in = src + sample * g.in_channels * (int64_t)g.in_len;
    for (int c0 = 0; c0 < g.in_channels; c0 += chunk) {
        const int cc = min(chunk, g.in_channels - c0), reduction = cc * g.k, steps = round_up8(reduction) / MMA_K;
        __syncthreads();    // the previous chunk's readers are done
        const float* lines = in + (int64_t)c0 * g.in_len;
        stage(xs, cc, width, tid, threads, src,
              [&](int c, int j) -> const float* {
                  const int x = l0 - g.pad + j;
                  return x >= 0 && x < g.in_len ? lines + (int64_t)c * g.in_len + x : nullptr;
              },
              [&](int c, int j) { return c * width + j; });
        stage(ws, steps * MMA_K, bm, tid, threads, src,
              [&](int r, int m) -> const float* {
                  const int o = m0 + m;
                  if (o >= g.out_channels || r >= reduction) return nullptr;
                  if (!FLIP) return w + (int64_t)o * g.in_channels * g.k + c0 * g.k + r;
                  const int c = r / g.k, t = r - c * g.k;
                  return w + ((int64_t)(c0 + c) * g.out_channels + o) * g.k + g.k - 1 - t;
              },
              [&](int r, int m) { return r * lda + m; });
        for (int r = tid; r < steps * MMA_K; r += threads) {
            const int c = r / g.k;
            offset[r] = r < reduction ? c * width + r - c * g.k : zeros;
        }
        copies_done();
        __syncthreads();
        for (int s = 0; s < steps; ++s) {
            const int k0 = s * MMA_K + t4;
            const float* xa = xs + offset[k0] + wn + gq;
            const float* xb = xs + offset[k0 + 4] + wn + gq;
            unsigned a[MT][4];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const float* wa = ws + k0 * lda + wm + i * MMA_M + gq;
                a[i][0] = to_tf32(wa[0]);
                a[i][1] = to_tf32(wa[8]);
                a[i][2] = to_tf32(wa[4 * lda]);
                a[i][3] = to_tf32(wa[4 * lda + 8]);
            }
#pragma unroll
            for (int j = 0; j < LINE_NT; ++j) {
                const unsigned b[2] = {to_tf32(xa[j * MMA_N]), to_tf32(xb[j * MMA_N])};
#pragma unroll
                for (int i = 0; i < MT; ++i) mma_tf32(acc[i][j], a[i], b);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int o = m0 + wm + i * MMA_M + gq + 8 * h;
            if (o >= g.out_channels) continue;
            float* out = dst + (sample * g.out_channels + o) * (int64_t)g.out_len;
#pragma unroll
            for (int j = 0; j < LINE_NT; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int l = l0 + wn + j * MMA_N + 2 * t4 + e;
                    const float v = acc[i][j][2 * h + e];
                    if (l < g.out_len) out[l] = code < 0 ? v : activate(code, v, alpha, beta);
                }
        }
}

// The forward / data primitive of line_impl, pipelined: the block holds its bm rows of the whole
// weight (K = in_channels * k rows, up to a multiple of 8) as TF32 A fragments, converted once, and
// strides over the position tiles (tile = sample * tiles + tile of the sample, blockIdx.x + i *
// gridDim.x) with a ring of `stages` (2 or 3) source windows: the copies of the next stages - 1
// tiles' windows are in flight while the warps multiply the current one.  A window row holds
// `span` positions from l0 - pad - shift, a multiple of 4 (l0 is), so that where the source's
// rows are 16-byte aligned every 4 positions are one 16-byte copy, wholly inside the row or
// wholly outside (zeros).  Shared memory: the fragments [steps][m-tiles][LANES] of 4 words (a
// lane's A in one 16-byte load), the ring [stages][in_channels * stride + bn] (rows stride = bn
// + up4(k + 7) apart, so that the four K rows of a fragment, taps of one channel or of
// neighbours, fall into distinct banks, then a row of bn zeros for the K padding rows), the K
// rows' window offsets [steps * 8].  A block of
// (32, warps_n, warps_m) threads: warp (y, z) owns MT m-tiles from z * MT and PIPE_NT n-tiles
// from y * PIPE_NT.  Grid: (blocks striding over n_tiles tiles, channel tiles).
template <int MT, bool FLIP>
__device__ void line_pipe_impl(const float* src, const float* w, const float* bias, float* dst, int64_t n_tiles,
                               int tiles, int stages, int has_bias, int code, float alpha, float beta, LineGeo g) {
    extern __shared__ __align__(16) unsigned char gemm1d_tf32_shared[];
    const int m_tiles = blockDim.z * MT, bm = m_tiles * MMA_M, bn = blockDim.y * PIPE_NT * MMA_N;
    const int reduction = g.in_channels * g.k, steps = round_up8(reduction) / MMA_K;
    const int shift = ((-g.pad) % 4 + 4) % 4, span = (bn + g.k - 1 + shift + 3) / 4 * 4;
    const int stride = bn + (g.k + 7 + 3) / 4 * 4, window = g.in_channels * stride + bn;
    const bool by16 = (g.in_len & 3) == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0;
    uint4* fragments = reinterpret_cast<uint4*>(gemm1d_tf32_shared);            // [steps][m_tiles][LANES]
    float* ring = reinterpret_cast<float*>(fragments + steps * m_tiles * LANES);   // [stages][window]
    int* offset = reinterpret_cast<int*>(ring + stages * window);                  // [steps * MMA_K]
    const int m0 = blockIdx.y * bm;
    const int lane = threadIdx.x, gq = lane >> 2, t4 = lane & 3;
    const int first_m = threadIdx.z * MT, wn = threadIdx.y * PIPE_NT * MMA_N;
    const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * LANES + lane, threads = LANES * blockDim.y * blockDim.z;
    auto stage_window = [&](int64_t tile, float* xs) {
        const int64_t sample = tile / tiles;
        const int from = (int)(tile - sample * tiles) * bn - g.pad - shift;
        const float* lines = src + sample * g.in_channels * (int64_t)g.in_len;
        if (by16) {
            const int quads = span / 4;
            for (int e = tid; e < g.in_channels * quads; e += threads) {
                const int c = e / quads, j = 4 * (e - c * quads), at = from + j;
                const bool inside = at >= 0 && at < g.in_len;
                copy_async16(xs + c * stride + j, inside ? lines + (int64_t)c * g.in_len + at : src, inside ? 16 : 0);
            }
            return;
        }
        stage(xs, g.in_channels, span, tid, threads, src,
              [&](int c, int j) -> const float* {
                  const int at = from + j;
                  return at >= 0 && at < g.in_len ? lines + (int64_t)c * g.in_len + at : nullptr;
              },
              [&](int c, int j) { return c * stride + j; });
    };
    for (int ahead = 0; ahead < stages - 1; ++ahead) {
        const int64_t tile = blockIdx.x + (int64_t)ahead * gridDim.x;
        if (tile < n_tiles) stage_window(tile, ring + ahead * window);
        copies_commit();
    }
    unsigned* words = reinterpret_cast<unsigned*>(fragments);
    for (int e = tid; e < steps * m_tiles * LANES * 4; e += threads) {
        const int q = e & 3, l = (e >> 2) & (LANES - 1), mt = (e >> 7) % m_tiles, s = (e >> 7) / m_tiles;
        const int o = m0 + mt * MMA_M + (l >> 2) + 8 * (q & 1), r = s * MMA_K + (l & 3) + 4 * (q >> 1);
        float v = 0.f;
        if (o < g.out_channels && r < reduction) {
            const int c = r / g.k, t = r - c * g.k;
            v = FLIP ? w[((int64_t)c * g.out_channels + o) * g.k + g.k - 1 - t] : w[((int64_t)o * g.in_channels + c) * g.k + t];
        }
        words[e] = to_tf32(v);
    }
    for (int r = tid; r < steps * MMA_K; r += threads) {
        const int c = r / g.k;
        offset[r] = r < reduction ? c * stride + r - c * g.k + shift : g.in_channels * stride;
    }
    for (int e = tid; e < stages * bn; e += threads) ring[(e / bn) * window + g.in_channels * stride + e % bn] = 0.f;
    float start[MT][2];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int o = m0 + (first_m + i) * MMA_M + gq + 8 * h;
            start[i][h] = has_bias && o < g.out_channels ? bias[o] : 0.f;
        }
    const bool pairs = ((g.out_len | (int)(reinterpret_cast<uintptr_t>(dst) >> 2)) & 1) == 0;
    int slot = 0;
    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        copies_wait(stages - 2);    // this thread's copies of the tile's window have landed
        __syncthreads();            // everyone's have, and the previous tile's slot is read
        const int refill = slot == 0 ? stages - 1 : slot - 1;
        const int64_t ahead = tile + (int64_t)(stages - 1) * gridDim.x;
        if (ahead < n_tiles) stage_window(ahead, ring + refill * window);
        copies_commit();
        const float* xs = ring + slot * window + wn + gq;
        float acc[MT][PIPE_NT][4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < PIPE_NT; ++j) {
                acc[i][j][0] = acc[i][j][1] = start[i][0];
                acc[i][j][2] = acc[i][j][3] = start[i][1];
            }
        for (int s = 0; s < steps; ++s) {
            const float* xa = xs + offset[s * MMA_K + t4];
            const float* xb = xs + offset[s * MMA_K + t4 + 4];
            unsigned a[MT][4];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const uint4 f = fragments[(s * m_tiles + first_m + i) * LANES + lane];
                a[i][0] = f.x;
                a[i][1] = f.y;
                a[i][2] = f.z;
                a[i][3] = f.w;
            }
#pragma unroll
            for (int j = 0; j < PIPE_NT; ++j) {
                const unsigned b[2] = {to_tf32(xa[j * MMA_N]), to_tf32(xb[j * MMA_N])};
#pragma unroll
                for (int i = 0; i < MT; ++i) mma_tf32(acc[i][j], a[i], b);
            }
        }
        const int64_t sample = tile / tiles;
        const int l0 = (int)(tile - sample * tiles) * bn;
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int o = m0 + (first_m + i) * MMA_M + gq + 8 * h;
                if (o >= g.out_channels) continue;
                float* out = dst + (sample * g.out_channels + o) * (int64_t)g.out_len;
#pragma unroll
                for (int j = 0; j < PIPE_NT; ++j) {
                    const int l = l0 + wn + j * MMA_N + 2 * t4;
                    float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                    if (code >= 0) {
                        v0 = activate(code, v0, alpha, beta);
                        v1 = activate(code, v1, alpha, beta);
                    }
                    if (pairs && l + 1 < g.out_len) {
                        *reinterpret_cast<float2*>(out + l) = make_float2(v0, v1);
                    } else {
                        if (l < g.out_len) out[l] = v0;
                        if (l + 1 < g.out_len) out[l + 1] = v1;
                    }
                }
            }
        slot = slot + 1 == stages ? 0 : slot + 1;
    }
}

// part[slice, o, c * k + t] = the sum over the positions of `slice` (chunks_per_slice chunks of
// `chunk` positions of one sample each) of dy[s, o, l] * x[s, c, l - pad + t]; g is the forward's
// (in: x, out: dy).  A chunk stages dY's rows [bm][chunk + 4] (a fragment's loads at 4 g + t4
// banks; by 16-byte copies where the rows are 16-byte aligned) and the X window of the tile's
// channels (chunk + k - 1 positions each, rows chunk + k apart); a lane reads B at its column's
// (c, t) offset in the window plus the position.  `stages` (2 or 3) chunk buffers form a ring:
// the copies of the next stages - 1 chunks are in flight while the warps multiply the current
// one.  Warp y = wn * warps_m + wm of a block owns MT m-tiles at wm and NT n-tiles at wn.
// Grid: (channel tiles * column tiles, slices).
template <int MT, int NT>
__device__ void weight_impl(const float* dy, const float* x, float* part, int64_t samples, int chunks_per_slice,
                            int chunk, int stages, int warps_m, LineGeo g) {
    extern __shared__ __align__(16) unsigned char gemm1d_tf32_shared[];
    const int warps_n = blockDim.y / warps_m, layers = blockDim.z;
    const int bm = warps_m * MT * MMA_M, bn = warps_n * NT * MMA_N;
    const int lda = chunk + 4, stride = chunk + g.k;
    const int window_rows = min(g.in_channels, (bn - 1) / g.k + 2);
    const int stage_size = (bm * lda + window_rows * stride + 3) / 4 * 4;    // floats: 16-byte aligned stages
    const WeightTile tile = weight_tile(bm, bn, g);
    const int columns = tile.columns, m0 = tile.m0, n0 = tile.n0;
    float* ring = reinterpret_cast<float*>(gemm1d_tf32_shared);    // [stages][stage_size]: [bm][lda], [c_count][stride]
    const int lane = threadIdx.x, gq = lane >> 2, t4 = lane & 3;
    const int wm = (threadIdx.y % warps_m) * MT * MMA_M, wn = (threadIdx.y / warps_m) * NT * MMA_N;
    int offset[NT];                                  // this lane's B column's (c, t) in the window
#pragma unroll
    for (int j = 0; j < NT; ++j) offset[j] = window_offset(n0 + wn + j * MMA_N + gq, tile, stride, g);
    const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * LANES + lane;
    const int threads = LANES * blockDim.y * layers;
    const bool by16 = (g.out_len & 3) == 0 && (reinterpret_cast<uintptr_t>(dy) & 15) == 0;
    const SliceChunks slice = slice_chunks(samples, chunks_per_slice, chunk, g);
    auto stage_chunk = [&](int64_t q, float* as) {
        int64_t s;
        int l0;
        chunk_at(q, slice, chunk, s, l0);
        if (by16) {
            const float* dys = dy + (s * g.out_channels + m0) * (int64_t)g.out_len + l0;
            const int quads = chunk / 4;
            for (int e = tid; e < bm * quads; e += threads) {
                const int m = e / quads, p = 4 * (e - m * quads);
                const int valid = m0 + m < g.out_channels ? min(16, max(0, 4 * (g.out_len - l0 - p))) : 0;
                copy_async16(as + m * lda + p, valid > 0 ? dys + (int64_t)m * g.out_len + p : dy, valid);
            }
        } else {
            stage_dy_rows(dy, as, s, l0, m0, bm, chunk, tid, threads, g, [&](int m, int p) { return m * lda + p; });
        }
        stage_x_window(x, as + bm * lda, s, l0, chunk, tile.c_first, tile.c_count, stride, tid, threads, g, dy);
    };
    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
    for (int ahead = 0; ahead < stages - 1; ++ahead) {
        if (slice.first + ahead < slice.last) stage_chunk(slice.first + ahead, ring + ahead * stage_size);
        copies_commit();
    }
    int slot = 0;
    for (int64_t q = slice.first; q < slice.last; ++q) {
        copies_wait(stages - 2);    // this thread's copies of chunk q have landed
        __syncthreads();            // everyone's have, and chunk q - 1's slot is read
        const int refill = slot == 0 ? stages - 1 : slot - 1;
        if (q + stages - 1 < slice.last) stage_chunk(q + stages - 1, ring + refill * stage_size);
        copies_commit();
        const float* as = ring + slot * stage_size;
        const float* xs = as + bm * lda;
        for (int p = threadIdx.z * MMA_K; p < chunk; p += layers * MMA_K) {
            unsigned a[MT][4];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const float* rows = as + (wm + i * MMA_M + gq) * lda + p + t4;
                a[i][0] = to_tf32(rows[0]);
                a[i][1] = to_tf32(rows[8 * lda]);
                a[i][2] = to_tf32(rows[4]);
                a[i][3] = to_tf32(rows[8 * lda + 4]);
            }
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const unsigned b[2] = {to_tf32(xs[offset[j] + p + t4]), to_tf32(xs[offset[j] + p + t4 + 4])};
#pragma unroll
                for (int i = 0; i < MT; ++i) mma_tf32(acc[i][j], a[i], b);
            }
        }
        slot = slot + 1 == stages ? 0 : slot + 1;
    }
    float* red = reinterpret_cast<float*>(gemm1d_tf32_shared);    // [warps][MT * NT * 4][LANES], after the chunks
    const int cell = threadIdx.y * MT * NT * 4 * LANES + lane;
    for (int z = 1; z < layers; ++z) {
        __syncthreads();
        if (threadIdx.z == z)
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) red[cell + ((i * NT + j) * 4 + e) * LANES] = acc[i][j][e];
        __syncthreads();
        if (threadIdx.z == 0)
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[i][j][e] += red[cell + ((i * NT + j) * 4 + e) * LANES];
    }
    if (threadIdx.z != 0) return;
    float* out = part + (int64_t)blockIdx.y * g.out_channels * columns;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int o = m0 + wm + i * MMA_M + gq + 8 * h;
            if (o >= g.out_channels) continue;
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = n0 + wn + j * MMA_N + 2 * t4 + e;
                    if (col < columns) out[(int64_t)o * columns + col] = acc[i][j][2 * h + e];
                }
        }
}

#define GEMM1D_TF32_LINE(MT)                                                                                      \
    extern "C" __global__ void gemm1d_tf32_forward_m##MT##_f32(const float* src, const float* w, const float* bias, \
                                                              float* dst, int tiles, int has_bias, int chunk,      \
                                                              int code, float alpha, float beta, LineGeo g) {      \
        line_impl<MT, false>(src, w, bias, dst, tiles, has_bias, chunk, code, alpha, beta, g);                    \
    }                                                                                                             \
    extern "C" __global__ void gemm1d_tf32_data_m##MT##_f32(const float* src, const float* w, const float* bias,    \
                                                           float* dst, int tiles, int has_bias, int chunk,         \
                                                           int code, float alpha, float beta, LineGeo g) {         \
        line_impl<MT, true>(src, w, bias, dst, tiles, has_bias, chunk, code, alpha, beta, g);                     \
    }
#define GEMM1D_TF32_PIPE(MT)                                                                                      \
    extern "C" __global__ void gemm1d_tf32_forward_pipe_m##MT##_f32(                                              \
        const float* src, const float* w, const float* bias, float* dst, int64_t n_tiles, int tiles, int stages,  \
        int has_bias, int code, float alpha, float beta, LineGeo g) {                                             \
        line_pipe_impl<MT, false>(src, w, bias, dst, n_tiles, tiles, stages, has_bias, code, alpha, beta, g);     \
    }                                                                                                             \
    extern "C" __global__ void gemm1d_tf32_data_pipe_m##MT##_f32(                                                 \
        const float* src, const float* w, const float* bias, float* dst, int64_t n_tiles, int tiles, int stages,  \
        int has_bias, int code, float alpha, float beta, LineGeo g) {                                             \
        line_pipe_impl<MT, true>(src, w, bias, dst, n_tiles, tiles, stages, has_bias, code, alpha, beta, g);      \
    }
#define GEMM1D_TF32_WEIGHT(MT, NT)                                                                                \
    extern "C" __global__ void gemm1d_tf32_weight_m##MT##n##NT##_f32(const float* dy, const float* x, float* part, \
                                                                    int64_t samples, int chunks_per_slice,         \
                                                                    int chunk, int stages, int warps_m, LineGeo g) { \
        weight_impl<MT, NT>(dy, x, part, samples, chunks_per_slice, chunk, stages, warps_m, g);                  \
    }
GEMM1D_TF32_LINE(1)
GEMM1D_TF32_LINE(2)
GEMM1D_TF32_PIPE(1)
GEMM1D_TF32_PIPE(2)
GEMM1D_TF32_WEIGHT(1, 1)
GEMM1D_TF32_WEIGHT(1, 4)
GEMM1D_TF32_WEIGHT(2, 1)
GEMM1D_TF32_WEIGHT(2, 4)
