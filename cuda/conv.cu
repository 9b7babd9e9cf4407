// The convolution family: im2col/col2im for the GEMM algorithm, direct kernels for depthwise and
// small-channel convolutions (conv_tiled.cu has the faster 1D/2D ones), the bias add and the
// reductions (bias gradient partials, slice sums, per-sample weight partials).
//
// Every kernel works on one convolution between an image side (N, G*c, id, ih, iw) and a
// column side (N, G*m, od, oh, ow), 1D and 2D being 3D with leading axes of size 1 (see
// minitrain/ops/conv_geometry.py): column position o reads image position
//     o * stride - pad + k * dilation        (outside the image: zero).
// The weight is (G*m, c, kd, kh, kw).  Pads may be negative (ConvTranspose's output_shape).
// Nothing here uses atomics: every result is a gather or a block reduction, so every kernel
// is deterministic.
#include "common.cuh"
#include "activation.cuh"

// The geometry, passed by value; its fields are the last kernel arguments (21 int32).
struct ConvGeo {
    int group, c, m;     // groups; image / column channels per group
    int id, ih, iw;      // image spatial
    int od, oh, ow;      // column spatial
    int kd, kh, kw;      // kernel
    int sd, sh, sw;      // strides
    int dd, dh, dw;      // dilations
    int pd, ph, pw;      // begin pads
};

__device__ __forceinline__ int64_t image_plane(const ConvGeo& g) { return (int64_t)g.id * g.ih * g.iw; }
__device__ __forceinline__ int64_t column_plane(const ConvGeo& g) { return (int64_t)g.od * g.oh * g.ow; }
__device__ __forceinline__ int kernel_taps(const ConvGeo& g) { return g.kd * g.kh * g.kw; }

// Column index along one axis that image position `i` meets through tap `k`, or -1.
__device__ __forceinline__ int column_of(int i, int k, int stride, int dilation, int pad, int size) {
    int num = i + pad - k * dilation;
    if (num < 0 || num % stride) return -1;
    num /= stride;
    return num < size ? num : -1;
}

// Image index along one axis that column position `o` reads through tap `k`, or -1.
__device__ __forceinline__ int image_of(int o, int k, int stride, int dilation, int pad, int size) {
    int i = o * stride - pad + k * dilation;
    return (i >= 0 && i < size) ? i : -1;
}

// Sum of `v` over the block (blockDim.x a power of two <= 1024); the result in thread 0.
template <typename A> __device__ A block_sum(A v) {
    __shared__ A partial[32];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? partial[lane] : A(0);
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    }
    return v;
}

// ---------------------------------------------------------------------------- GEMM algorithm
// col (samples, G, c, taps, P): the image patches, row (ci, tap) of group g, column p.  Image
// channels stride over blockIdx.y and positions over the x blocks; a thread writes its
// position's every tap (independent loads in flight) after dividing it once.
template <typename T> __device__ void im2col_impl(const T* img, T* col, int64_t samples, ConvGeo g) {
    const int taps = kernel_taps(g), P = (int)column_plane(g);
    const int64_t plane = image_plane(g), channels = samples * g.group * g.c;
    for (int64_t ch = blockIdx.y; ch < channels; ch += gridDim.y) {
        const T* src = img + ch * plane;
        T* dst = col + ch * taps * P;
        for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < P; p += gridDim.x * blockDim.x) {
            const int ox = p % g.ow, rest = p / g.ow, oy = rest % g.oh, oz = rest / g.oh;
            T* out = dst + p;
            for (int kz = 0; kz < g.kd; ++kz) {
                const int z = image_of(oz, kz, g.sd, g.dd, g.pd, g.id);
                for (int ky = 0; ky < g.kh; ++ky) {
                    const int y = image_of(oy, ky, g.sh, g.dh, g.ph, g.ih);
                    const bool row = z >= 0 && y >= 0;
                    const T* line = src + ((int64_t)(row ? z : 0) * g.ih + (row ? y : 0)) * g.iw;
                    for (int kx = 0; kx < g.kw; ++kx, out += P) {
                        const int x = image_of(ox, kx, g.sw, g.dw, g.pw, g.iw);
                        *out = (row && x >= 0) ? line[x] : from_acc<T>(0);
                    }
                }
            }
        }
    }
}

// image = sum over taps of col (the adjoint of im2col) plus bias[channel] when has_bias:
// a gather over the taps that reach each image point.
template <typename T>
__device__ void col2im_impl(const T* col, const T* bias, T* img, int64_t samples, int has_bias, ConvGeo g) {
    const int taps = kernel_taps(g), channels = g.group * g.c, plane = (int)image_plane(g);
    const int64_t P = column_plane(g), rows = samples * channels;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const acc_t<T> start = has_bias ? to_acc(bias[r % channels]) : acc_t<T>(0);
        const T* src = col + r * taps * P;
        for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < plane; q += gridDim.x * blockDim.x) {
            const int x = q % g.iw, rest = q / g.iw, y = rest % g.ih, z = rest / g.ih;
            acc_t<T> acc = start;
            for (int kz = 0; kz < g.kd; ++kz) {
                const int oz = column_of(z, kz, g.sd, g.dd, g.pd, g.od);
                if (oz < 0) continue;
                for (int ky = 0; ky < g.kh; ++ky) {
                    const int oy = column_of(y, ky, g.sh, g.dh, g.ph, g.oh);
                    if (oy < 0) continue;
                    for (int kx = 0; kx < g.kw; ++kx) {
                        const int ox = column_of(x, kx, g.sw, g.dw, g.pw, g.ow);
                        if (ox < 0) continue;
                        const int tap = (kz * g.kh + ky) * g.kw + kx;
                        acc += to_acc(src[tap * P + ((int64_t)oz * g.oh + oy) * g.ow + ox]);
                    }
                }
            }
            img[r * plane + q] = from_acc<T>(acc);
        }
    }
}

// y[row, j] += bias[row % channels] over `rows` rows of `plane` elements (row = sample * channels
// + channel), each row cut in chunks of `chunk` elements, one block per (row, chunk): no
// per-element division.
template <typename T>
__device__ void add_bias_impl(T* y, const T* bias, int64_t rows, int64_t plane, int64_t channels, int64_t chunk) {
    const int64_t chunks = (plane + chunk - 1) / chunk;
    for (int64_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
        const int64_t row = b / chunks, begin = (b % chunks) * chunk;
        const int64_t end = begin + chunk < plane ? begin + chunk : plane;
        const acc_t<T> v = to_acc(bias[row % channels]);
        T* dst = y + row * plane;
        for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) dst[j] = from_acc<T>(to_acc(dst[j]) + v);
    }
}

// dst[i] = (accumulate ? dst[i] : 0) + sum over b of part[b * count + i]: the per-sample weight
// gradients of a chunk summed in a fixed order.
template <typename T>
__device__ void sum_batches_impl(const T* part, T* dst, int64_t count, int64_t batches, int accumulate) {
    GRID_STRIDE_LOOP(i, count) {
        acc_t<T> acc = accumulate ? to_acc(dst[i]) : acc_t<T>(0);
        for (int64_t b = 0; b < batches; ++b) acc += to_acc(part[b * count + i]);
        dst[i] = from_acc<T>(acc);
    }
}

// The bias gradient in two deterministic passes.  First, part[k * rows + row] = the sum of
// chunk k (of `chunk` elements) of dy's row `row` (= sample * channels + channel): one block
// each; then sum_slices adds each channel's partials (stride `channels`).
template <typename T>
__device__ void bias_grad_partial_impl(const T* dy, acc_t<T>* part, int64_t rows, int64_t plane, int64_t chunk) {
    const int64_t chunks = (plane + chunk - 1) / chunk;
    for (int64_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
        const int64_t row = b / chunks, k = b % chunks, begin = k * chunk;
        const int64_t end = begin + chunk < plane ? begin + chunk : plane;
        const T* src = dy + row * plane;
        acc_t<T> acc = 0;
        for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) acc += to_acc(src[j]);
        acc = block_sum(acc);
        if (threadIdx.x == 0) part[k * rows + row] = acc;
        __syncthreads();    // block_sum's shared partials are reused by the next row
    }
}

// out[i] = the sum over s < slices of part[s * count + i]: one warp per element, each lane
// summing every 32nd slice and the lanes then each other's sums, always in the same order.
template <typename T>
__device__ void sum_slices_impl(const acc_t<T>* part, T* out, int64_t count, int64_t slices) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t i = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); i < count; i += warps) {
        acc_t<T> acc = 0;
        for (int64_t s = lane; s < slices; s += 32) acc += part[s * count + i];
        for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
        if (lane == 0) out[i] = from_acc<T>(acc);
    }
}

// ---------------------------------------------------------------------------- direct algorithm
// cols[b, co, o] = act(bias[co] + sum over (ci, tap) of w[co, ci, tap] * img[b, g*c + ci, o's tap point]),
// act: activate_or_keep(code, ., alpha, beta) (FusedConv's activation; -1 none).
template <typename T>
__device__ void direct_forward_impl(const T* img, const T* w, const T* bias, T* cols, int64_t samples, int has_bias,
                                    int code, acc_t<T> alpha, acc_t<T> beta, ConvGeo g) {
    const int taps = kernel_taps(g), col_channels = g.group * g.m;
    const int64_t P = column_plane(g), plane = image_plane(g);
    const int64_t n = samples * col_channels * P;
    GRID_STRIDE_LOOP(i, n) {
        const int64_t p = i % P, bco = i / P;
        const int co = (int)(bco % col_channels);
        const int64_t b = bco / col_channels;
        const int ox = (int)(p % g.ow), oy = (int)((p / g.ow) % g.oh), oz = (int)(p / ((int64_t)g.ow * g.oh));
        const T* src = img + (b * g.group * g.c + (int64_t)(co / g.m) * g.c) * plane;
        const T* wt = w + (int64_t)co * g.c * taps;
        acc_t<T> acc = has_bias ? to_acc(bias[co]) : acc_t<T>(0);
        for (int kz = 0; kz < g.kd; ++kz) {
            const int z = image_of(oz, kz, g.sd, g.dd, g.pd, g.id);
            if (z < 0) continue;
            for (int ky = 0; ky < g.kh; ++ky) {
                const int y = image_of(oy, ky, g.sh, g.dh, g.ph, g.ih);
                if (y < 0) continue;
                for (int kx = 0; kx < g.kw; ++kx) {
                    const int x = image_of(ox, kx, g.sw, g.dw, g.pw, g.iw);
                    if (x < 0) continue;
                    const int tap = (kz * g.kh + ky) * g.kw + kx;
                    const int64_t at = ((int64_t)z * g.ih + y) * g.iw + x;
                    for (int ci = 0; ci < g.c; ++ci)
                        acc += to_acc(src[ci * plane + at]) * to_acc(wt[ci * taps + tap]);
                }
            }
        }
        cols[i] = from_acc<T>(activate_or_keep(code, acc, alpha, beta));
    }
}

// img[b, g*c + ci, i] = bias + sum over (mo, tap reaching i) of w[g*m + mo, ci, tap] * cols[b, g*m + mo, o].
template <typename T>
__device__ void direct_data_grad_impl(const T* cols, const T* w, const T* bias, T* img, int64_t samples,
                                      int has_bias, ConvGeo g) {
    const int taps = kernel_taps(g), img_channels = g.group * g.c;
    const int64_t P = column_plane(g), plane = image_plane(g);
    const int64_t n = samples * img_channels * plane;
    GRID_STRIDE_LOOP(i, n) {
        const int64_t q = i % plane, bch = i / plane;
        const int ch = (int)(bch % img_channels);
        const int64_t b = bch / img_channels;
        const int grp = ch / g.c, ci = ch % g.c;
        const int x = (int)(q % g.iw), y = (int)((q / g.iw) % g.ih), z = (int)(q / ((int64_t)g.iw * g.ih));
        const T* src = cols + (b * g.group + grp) * g.m * P;
        const T* wt = w + ((int64_t)grp * g.m * g.c + ci) * taps;
        acc_t<T> acc = has_bias ? to_acc(bias[ch]) : acc_t<T>(0);
        for (int kz = 0; kz < g.kd; ++kz) {
            const int oz = column_of(z, kz, g.sd, g.dd, g.pd, g.od);
            if (oz < 0) continue;
            for (int ky = 0; ky < g.kh; ++ky) {
                const int oy = column_of(y, ky, g.sh, g.dh, g.ph, g.oh);
                if (oy < 0) continue;
                for (int kx = 0; kx < g.kw; ++kx) {
                    const int ox = column_of(x, kx, g.sw, g.dw, g.pw, g.ow);
                    if (ox < 0) continue;
                    const int tap = (kz * g.kh + ky) * g.kw + kx;
                    const int64_t at = ((int64_t)oz * g.oh + oy) * g.ow + ox;
                    for (int mo = 0; mo < g.m; ++mo)
                        acc += to_acc(src[mo * P + at]) * to_acc(wt[(int64_t)mo * g.c * taps + tap]);
                }
            }
        }
        img[i] = from_acc<T>(acc);
    }
}

// dw[co, ci, tap] = sum over (b, o) of cols[b, co, o] * img[b, g*c + ci, o's tap point]:
// one block per weight element.
template <typename T>
__device__ void direct_weight_grad_impl(const T* cols, const T* img, T* dw, int64_t samples, ConvGeo g) {
    const int taps = kernel_taps(g);
    const int64_t e = blockIdx.x;
    const int tap = (int)(e % taps), ci = (int)((e / taps) % g.c), co = (int)(e / ((int64_t)taps * g.c));
    const int kx = tap % g.kw, ky = (tap / g.kw) % g.kh, kz = tap / (g.kw * g.kh);
    const int64_t P = column_plane(g), plane = image_plane(g), n = samples * P;
    const int64_t col_stride = (int64_t)g.group * g.m * P, img_stride = (int64_t)g.group * g.c * plane;
    const T* src = cols + co * P;
    const T* im = img + ((int64_t)(co / g.m) * g.c + ci) * plane;
    acc_t<T> acc = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const int64_t b = j / P, p = j % P;
        const int ox = (int)(p % g.ow), oy = (int)((p / g.ow) % g.oh), oz = (int)(p / ((int64_t)g.ow * g.oh));
        const int z = image_of(oz, kz, g.sd, g.dd, g.pd, g.id);
        const int y = image_of(oy, ky, g.sh, g.dh, g.ph, g.ih);
        const int x = image_of(ox, kx, g.sw, g.dw, g.pw, g.iw);
        if (z >= 0 && y >= 0 && x >= 0)
            acc += to_acc(src[b * col_stride + p]) * to_acc(im[b * img_stride + ((int64_t)z * g.ih + y) * g.iw + x]);
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) dw[e] = from_acc<T>(acc);
}

// ---------------------------------------------------------------------------- instantiations
#define GEO ConvGeo g
#define CONV_KERNELS(T, S)                                                                                      \
    extern "C" __global__ void im2col_##S(const T* img, T* col, int64_t samples, GEO) {                         \
        im2col_impl<T>(img, col, samples, g);                                                                   \
    }                                                                                                           \
    extern "C" __global__ void col2im_##S(const T* col, const T* bias, T* img, int64_t samples, int has_bias,   \
                                          GEO) {                                                                \
        col2im_impl<T>(col, bias, img, samples, has_bias, g);                                                   \
    }                                                                                                           \
    extern "C" __global__ void add_bias_##S(T* y, const T* bias, int64_t rows, int64_t plane, int64_t channels, \
                                            int64_t chunk) {                                                    \
        add_bias_impl<T>(y, bias, rows, plane, channels, chunk);                                                \
    }                                                                                                           \
    extern "C" __global__ void sum_batches_##S(const T* part, T* dst, int64_t count, int64_t batches,           \
                                               int accumulate) {                                                \
        sum_batches_impl<T>(part, dst, count, batches, accumulate);                                             \
    }                                                                                                           \
    extern "C" __global__ void bias_grad_partial_##S(const T* dy, acc_t<T>* part, int64_t rows, int64_t plane,  \
                                                     int64_t chunk) {                                           \
        bias_grad_partial_impl<T>(dy, part, rows, plane, chunk);                                                \
    }                                                                                                           \
    extern "C" __global__ void sum_slices_##S(const acc_t<T>* part, T* out, int64_t count, int64_t slices) {    \
        sum_slices_impl<T>(part, out, count, slices);                                                           \
    }                                                                                                           \
    extern "C" __global__ void direct_forward_##S(const T* img, const T* w, const T* bias, T* cols,             \
                                                  int64_t samples, int has_bias, int code, acc_t<T> alpha,      \
                                                  acc_t<T> beta, GEO) {                                         \
        direct_forward_impl<T>(img, w, bias, cols, samples, has_bias, code, alpha, beta, g);                    \
    }                                                                                                           \
    extern "C" __global__ void direct_data_grad_##S(const T* cols, const T* w, const T* bias, T* img,           \
                                                    int64_t samples, int has_bias, GEO) {                       \
        direct_data_grad_impl<T>(cols, w, bias, img, samples, has_bias, g);                                     \
    }                                                                                                           \
    extern "C" __global__ void direct_weight_grad_##S(const T* cols, const T* img, T* dw, int64_t samples,      \
                                                      GEO) {                                                    \
        direct_weight_grad_impl<T>(cols, img, dw, samples, g);                                                  \
    }
MT_FOR_FLOATS(CONV_KERNELS)
