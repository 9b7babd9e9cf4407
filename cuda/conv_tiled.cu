// Tiled direct convolutions for groups of few channels (depthwise; LeNet's first layer), 1D and
// 2D: the image is (N, G*c, ih, iw), the columns (N, G*m, oh, ow), the weight (G*m, c, kh, kw).
// A block of (bx, by) threads owns a tile of by rows x bx columns of its output plane for one
// (sample, group); it stages the input window the tile reads, every channel of the group, and
// the group's weights in shared memory (dynamic, sized by the launch), so each input value is
// read from global memory about once instead of once per tap.  The weight gradient sums over
// a slice of (sample, row) per block, every tap at once in registers, and conv.cu's sum_slices
// adds the slices in a fixed order: no atomics, deterministic.
#include "common.cuh"
#include "activation.cuh"

struct TileGeo {
    int group, c, m;    // groups; image / column channels per group
    int ih, iw, oh, ow;
    int kh, kw, sh, sw, dh, dw, ph, pw;
};

__device__ __forceinline__ int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Stage rows x width values of `channels` planes (each `plane` apart from `src`) whose top
// left corner is (y0, x0) into tile, zeros outside the plane: threads walk rows along y and
// columns along x, so no thread divides.
template <typename T>
__device__ void stage_window(const T* src, acc_t<T>* tile, int channels, int64_t plane, int rows, int width, int y0,
                             int x0, int h, int w) {
    for (int ch = 0; ch < channels; ++ch)
#pragma unroll 4
        for (int r = threadIdx.y; r < rows; r += blockDim.y) {
            const int y = y0 + r;
            acc_t<T>* dst = tile + (ch * rows + r) * width;
            if (y < 0 || y >= h) {
                for (int col = threadIdx.x; col < width; col += blockDim.x) dst[col] = acc_t<T>(0);
                continue;
            }
            const T* line = src + ch * plane + (int64_t)y * w;
            for (int col = threadIdx.x; col < width; col += blockDim.x) {
                const int x = x0 + col;
                dst[col] = (x >= 0 && x < w) ? to_acc(line[x]) : acc_t<T>(0);
            }
        }
}

// cols[b, g*m + mo, oy, ox] = act(bias + sum over (ci, ky, kx) of w[g*m + mo, ci, ky, kx] * img[b, g*c + ci, window]),
// act: activate_or_keep(code, ., alpha, beta) (FusedConv's activation; -1 none).
// A tile is blockDim.x columns by blockDim.y * rpt rows (each thread rpt rows, blockDim.y apart).
template <typename T>
__device__ void tiled_forward_impl(const T* img, const T* w, const T* bias, T* cols, int64_t samples, int has_bias,
                                   int rpt, int code, acc_t<T> alpha, acc_t<T> beta, TileGeo g) {
    typedef acc_t<T> A;
    extern __shared__ unsigned char shared_raw[];
    A* tile = reinterpret_cast<A*>(shared_raw);
    const int th = blockDim.y * rpt;
    const int rows = (th - 1) * g.sh + (g.kh - 1) * g.dh + 1;
    const int width = (blockDim.x - 1) * g.sw + (g.kw - 1) * g.dw + 1;
    const int taps = g.kh * g.kw, window = rows * width;
    A* wt = tile + g.c * window;
    const int tiles_x = (g.ow + blockDim.x - 1) / blockDim.x;
    const int ty0 = (blockIdx.x / tiles_x) * th, tx0 = (blockIdx.x % tiles_x) * blockDim.x;
    const int threads = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int ox = tx0 + threadIdx.x;
    const int64_t plane = (int64_t)g.ih * g.iw, P = (int64_t)g.oh * g.ow;
    for (int64_t bg = blockIdx.y; bg < samples * g.group; bg += gridDim.y) {
        const int grp = (int)(bg % g.group);
        __syncthreads();    // the previous (sample, group)'s readers are done
        stage_window(img + bg * g.c * plane, tile, g.c, plane, rows, width, ty0 * g.sh - g.ph, tx0 * g.sw - g.pw,
                     g.ih, g.iw);
        for (int i = tid; i < g.m * g.c * taps; i += threads) wt[i] = to_acc(w[(int64_t)grp * g.m * g.c * taps + i]);
        __syncthreads();
        if (ox >= g.ow) continue;
        for (int k = 0; k < rpt; ++k) {
            const int ly = threadIdx.y + k * blockDim.y, oy = ty0 + ly;
            if (oy >= g.oh) break;
            for (int mo = 0; mo < g.m; ++mo) {
                A acc = has_bias ? to_acc(bias[grp * g.m + mo]) : A(0);
                const A* wm = wt + mo * g.c * taps;
                for (int ci = 0; ci < g.c; ++ci) {
                    const A* t = tile + ci * window + ly * g.sh * width + threadIdx.x * g.sw;
                    for (int ky = 0; ky < g.kh; ++ky)
                        for (int kx = 0; kx < g.kw; ++kx)
                            acc += t[ky * g.dh * width + kx * g.dw] * wm[(ci * g.kh + ky) * g.kw + kx];
                }
                cols[(bg * g.m + mo) * P + (int64_t)oy * g.ow + ox] =
                    from_acc<T>(activate_or_keep(code, acc, alpha, beta));
            }
        }
    }
}

// img[b, g*c + ci, y, x] = bias + sum over (mo, ky, kx reaching (y, x)) of w[g*m + mo, ci, ky, kx] * cols[b, g*m + mo, oy, ox]
// Tiles as tiled_forward's, over the image.
// UNIT: both strides are 1, so every tap reaches a column and no thread divides.
template <typename T, bool UNIT>
__device__ void tiled_data_impl(const T* cols, const T* w, const T* bias, T* img, int64_t samples, int has_bias,
                                int rpt, TileGeo g) {
    typedef acc_t<T> A;
    extern __shared__ unsigned char shared_raw[];
    A* tile = reinterpret_cast<A*>(shared_raw);
    const int th = blockDim.y * rpt;
    const int rows = (th - 1 + (g.kh - 1) * g.dh) / g.sh + 2;    // the most any tile needs
    const int width = (blockDim.x - 1 + (g.kw - 1) * g.dw) / g.sw + 2;
    const int taps = g.kh * g.kw, window = rows * width;
    A* wt = tile + g.m * window;
    const int tiles_x = (g.iw + blockDim.x - 1) / blockDim.x;
    const int ty0 = (blockIdx.x / tiles_x) * th, tx0 = (blockIdx.x % tiles_x) * blockDim.x;
    const int oy0 = floor_div(ty0 + g.ph - (g.kh - 1) * g.dh, g.sh), ox0 = floor_div(tx0 + g.pw - (g.kw - 1) * g.dw, g.sw);
    const int threads = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int x = tx0 + threadIdx.x;
    const int64_t plane = (int64_t)g.ih * g.iw, P = (int64_t)g.oh * g.ow;
    for (int64_t bg = blockIdx.y; bg < samples * g.group; bg += gridDim.y) {
        const int grp = (int)(bg % g.group);
        __syncthreads();
        stage_window(cols + bg * g.m * P, tile, g.m, P, rows, width, oy0, ox0, g.oh, g.ow);
        for (int i = tid; i < g.m * g.c * taps; i += threads) wt[i] = to_acc(w[(int64_t)grp * g.m * g.c * taps + i]);
        __syncthreads();
        if (x >= g.iw) continue;
        for (int k = 0; k < rpt; ++k) {
            const int y = ty0 + threadIdx.y + k * blockDim.y;
            if (y >= g.ih) break;
            for (int ci = 0; ci < g.c; ++ci) {
                A acc = has_bias ? to_acc(bias[grp * g.c + ci]) : A(0);
                for (int ky = 0; ky < g.kh; ++ky) {
                    const int ny = y + g.ph - ky * g.dh;
                    if (!UNIT && (ny < 0 || ny % g.sh)) continue;
                    const int ry = (UNIT ? ny : ny / g.sh) - oy0;
                    for (int kx = 0; kx < g.kw; ++kx) {
                        const int nx = x + g.pw - kx * g.dw;
                        if (!UNIT && (nx < 0 || nx % g.sw)) continue;
                        const A* t = tile + ry * width + (UNIT ? nx : nx / g.sw) - ox0;
                        const A* wk = wt + (ci * g.kh + ky) * g.kw + kx;
                        for (int mo = 0; mo < g.m; ++mo) acc += t[mo * window] * wk[mo * g.c * taps];
                    }
                }
                img[(bg * g.c + ci) * plane + (int64_t)y * g.iw + x] = from_acc<T>(acc);
            }
        }
    }
}

// Register-tiled direct convolution for unit column stride and dilation: a thread computes
// ROWS_X neighbouring outputs of one row of one output channel, loading the ROWS_X + KW - 1
// source values of each kernel row once (through L1) and sliding the kernel over them; no
// shared memory, no synchronization.  DATA: the data gradient (unit strides both ways), as
// the forward convolution of the columns with the flipped kernel and pads (k - 1) * d - p;
// else the forward.  Threads stride over (output row, group of ROWS_X) along x and over (sample,
// group, output channel) planes along y.  Outputs pass through activate_or_keep(code, ., alpha,
// beta): FusedConv's activation on a forward, -1 (none) for the data gradient.
#ifndef MT_ROWS_X
#error "MT_ROWS_X comes from minitrain/providers/cuda/launch.py (nvcc -DMT_ROWS_X=...)"
#endif
#define ROWS_X MT_ROWS_X
template <typename T, int KW, bool DATA>
__device__ void rows_impl(const T* src, const T* w, const T* bias, T* dst, int64_t samples, int has_bias, int code,
                          acc_t<T> alpha, acc_t<T> beta, TileGeo g) {
    typedef acc_t<T> A;
    const int cin = DATA ? g.m : g.c, cout = DATA ? g.c : g.m, taps = g.kh * KW;
    const int src_h = DATA ? g.oh : g.ih, src_w = DATA ? g.ow : g.iw;
    const int H = DATA ? g.ih : g.oh, W = DATA ? g.iw : g.ow;
    const int stride_y = DATA ? 1 : g.sh;
    const int pad_y = DATA ? (g.kh - 1) * g.dh - g.ph : g.ph, pad_x = DATA ? (KW - 1) - g.pw : g.pw;
    const int groups_x = (W + ROWS_X - 1) / ROWS_X, positions = H * groups_x;
    const int64_t planes = samples * g.group * cout, src_plane = (int64_t)src_h * src_w;
    for (int64_t pl = blockIdx.y; pl < planes; pl += gridDim.y) {
        const int o = (int)(pl % cout);
        const int64_t bg = pl / cout;
        const int grp = (int)(bg % g.group);
        const A start = has_bias ? to_acc(bias[grp * cout + o]) : A(0);
        for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < positions; p += gridDim.x * blockDim.x) {
            const int y = p / groups_x, x0 = (p % groups_x) * ROWS_X;
            A acc[ROWS_X];
#pragma unroll
            for (int r = 0; r < ROWS_X; ++r) acc[r] = start;
            for (int ci = 0; ci < cin; ++ci) {
                const T* plane = src + (bg * cin + ci) * src_plane;
                const T* wc = DATA ? w + ((int64_t)(grp * g.m + ci) * g.c + o) * taps
                                   : w + ((int64_t)(grp * g.m + o) * g.c + ci) * taps;
                for (int ky = 0; ky < g.kh; ++ky) {
                    const int yy = y * stride_y - pad_y + ky * g.dh;
                    if (yy < 0 || yy >= src_h) continue;
                    const T* line = plane + (int64_t)yy * src_w;
                    A xs[ROWS_X + KW - 1];
#pragma unroll
                    for (int i = 0; i < ROWS_X + KW - 1; ++i) {
                        const int xx = x0 - pad_x + i;
                        xs[i] = (xx >= 0 && xx < src_w) ? to_acc(line[xx]) : A(0);
                    }
                    const T* wr = DATA ? wc + (g.kh - 1 - ky) * KW : wc + ky * KW;
#pragma unroll
                    for (int kx = 0; kx < KW; ++kx) {
                        const A wv = to_acc(wr[DATA ? KW - 1 - kx : kx]);
#pragma unroll
                        for (int r = 0; r < ROWS_X; ++r) acc[r] += wv * xs[r + kx];
                    }
                }
            }
            T* out = dst + (pl * H + y) * W + x0;
#pragma unroll
            for (int r = 0; r < ROWS_X; ++r)
                if (x0 + r < W) out[r] = from_acc<T>(activate_or_keep(code, acc[r], alpha, beta));
        }
    }
}

// part[slice, e] for weight element e = (co, ci, tap): the sum over the (sample, output row)
// pairs of `slice` (of `per_slice` pairs) of cols[b, co, oy, ox] * img[b, g*c + ci, tap's point].
// One block per (co, ci, slice); each thread keeps every tap's sum in registers (taps <= MAXT).
template <typename T, int MAXT>
__device__ void tiled_weight_impl(const T* cols, const T* img, acc_t<T>* part, int64_t samples, int64_t per_slice,
                                  TileGeo g) {
    typedef acc_t<T> A;
    __shared__ int tap_y[MAXT], tap_x[MAXT];
    __shared__ A sums[32][MAXT];
    const int taps = g.kh * g.kw, pairs_w = g.c * g.group * g.m;   // weight elements / taps
    const int pair = blockIdx.x % pairs_w;
    const int64_t slice = blockIdx.x / pairs_w;
    const int co = pair / g.c, ci = pair % g.c, grp = co / g.m;
    for (int t = threadIdx.x; t < taps; t += blockDim.x) {
        tap_y[t] = (t / g.kw) * g.dh;
        tap_x[t] = (t % g.kw) * g.dw;
    }
    __syncthreads();
    A acc[MAXT];
#pragma unroll
    for (int t = 0; t < MAXT; ++t) acc[t] = A(0);
    const int64_t plane = (int64_t)g.ih * g.iw, P = (int64_t)g.oh * g.ow;
    const int64_t first = slice * per_slice, last = min(first + per_slice, samples * g.oh);
    for (int64_t j = first * g.ow + threadIdx.x; j < last * g.ow; j += blockDim.x) {
        const int64_t row = j / g.ow, b = row / g.oh;
        const int oy = (int)(row % g.oh), ox = (int)(j % g.ow);
        const A d = to_acc(cols[(b * g.group * g.m + co) * P + (int64_t)oy * g.ow + ox]);
        const T* src = img + (b * g.group * g.c + (int64_t)grp * g.c + ci) * plane;
        const int iy = oy * g.sh - g.ph, ix = ox * g.sw - g.pw;
#pragma unroll
        for (int t = 0; t < MAXT; ++t) {
            if (t < taps) {
                const int yy = iy + tap_y[t], xx = ix + tap_x[t];
                if (yy >= 0 && yy < g.ih && xx >= 0 && xx < g.iw) acc[t] += d * to_acc(src[(int64_t)yy * g.iw + xx]);
            }
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int t = 0; t < MAXT; ++t) {
        A v = acc[t];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
        if (lane == 0 && t < taps) sums[warp][t] = v;
    }
    __syncthreads();
    for (int t = threadIdx.x; t < taps; t += blockDim.x) {
        A total = 0;
        for (int k = 0; k < (int)(blockDim.x >> 5); ++k) total += sums[k][t];
        part[slice * (int64_t)pairs_w * taps + (int64_t)pair * taps + t] = total;
    }
}

// rows_<direction>_k<KW>_<S>: rows_impl's kernel of one direction and width.
#define ROWS_KERNEL(T, S, DIRECTION, KW, DATA)                                                                  \
    extern "C" __global__ void rows_##DIRECTION##_k##KW##_##S(const T* s, const T* w, const T* b, T* d,         \
                                                              int64_t n, int hb, int code, acc_t<T> alpha,      \
                                                              acc_t<T> beta, TileGeo g) {                       \
        rows_impl<T, KW, DATA>(s, w, b, d, n, hb, code, alpha, beta, g);                                        \
    }

#define TILED_KERNELS(T, S)                                                                                     \
    extern "C" __global__ void tiled_forward_##S(const T* img, const T* w, const T* bias, T* cols, int64_t samples, \
                                                 int has_bias, int rpt, int code, acc_t<T> alpha, acc_t<T> beta, \
                                                 TileGeo g) {                                                   \
        tiled_forward_impl<T>(img, w, bias, cols, samples, has_bias, rpt, code, alpha, beta, g);                \
    }                                                                                                           \
    extern "C" __global__ void tiled_data_##S(const T* cols, const T* w, const T* bias, T* img, int64_t samples, \
                                              int has_bias, int rpt, TileGeo g) {                               \
        tiled_data_impl<T, false>(cols, w, bias, img, samples, has_bias, rpt, g);                               \
    }                                                                                                           \
    extern "C" __global__ void tiled_data_unit_##S(const T* cols, const T* w, const T* bias, T* img,            \
                                                   int64_t samples, int has_bias, int rpt, TileGeo g) {         \
        tiled_data_impl<T, true>(cols, w, bias, img, samples, has_bias, rpt, g);                                \
    }                                                                                                           \
    ROWS_KERNEL(T, S, forward, 3, false)                                                                        \
    ROWS_KERNEL(T, S, forward, 5, false)                                                                        \
    ROWS_KERNEL(T, S, data, 3, true)                                                                            \
    ROWS_KERNEL(T, S, data, 5, true)                                                                            \
    extern "C" __global__ void tiled_weight_t9_##S(const T* cols, const T* img, acc_t<T>* part, int64_t samples, \
                                                   int64_t per_slice, TileGeo g) {                              \
        tiled_weight_impl<T, 9>(cols, img, part, samples, per_slice, g);                                        \
    }                                                                                                           \
    extern "C" __global__ void tiled_weight_t25_##S(const T* cols, const T* img, acc_t<T>* part, int64_t samples, \
                                                    int64_t per_slice, TileGeo g) {                             \
        tiled_weight_impl<T, 25>(cols, img, part, samples, per_slice, g);                                       \
    }
MT_FOR_FLOATS(TILED_KERNELS)
