// Per-sample normalisations (LayerNormalization, InstanceNormalization, GroupNormalization) and
// their gradients over X viewed as a contiguous (rows, cols) buffer, each row normalised with its
// own mean and biased variance.  The affine entry of element (row, col) is
// ((row % period) * cols + col) / stride (ops/sample_normalization.py's layout).
//
// A block per row (grid-stride over rows) for the forward pass and dX; a block per affine entry
// for dscale and dbias.  Rows of at most NARROW_COLS columns (LayerNormalization over few
// channels) instead get a thread per row, whose passes over its row hit the cache, and their
// dscale and dbias (one entry per column) are summed per block of rows into partials that
// sum_slices (conv.cu) adds in a fixed order.  Sums in acc_t<T> (float for half); the statistics
// are stored as T.  The variance is taken in a second pass over the row, of x - mean, so nothing
// cancels.
#include "common.cuh"

#ifndef MT_NARROW_COLS
#error "MT_NARROW_COLS comes from minitrain/providers/cuda/launch.py (nvcc -DMT_NARROW_COLS=...)"
#endif
#define NARROW_COLS MT_NARROW_COLS

// The block-wide sum of v, in every thread (blockDim.x a multiple of 32, at most 1024).  Every
// thread of the block calls it; it may be called again in the same kernel.
template <typename A> __device__ A row_sum(A v) {
    __shared__ A warp_sums[32];
    __shared__ A total;
    for (int k = 16; k > 0; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();    // an earlier call's readers are done with warp_sums and total
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? warp_sums[lane] : A(0);
        for (int k = 16; k > 0; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
        if (lane == 0) total = v;
    }
    __syncthreads();
    return total;
}

__device__ __forceinline__ int64_t affine_index(int64_t row, int64_t col, int64_t cols, int64_t period,
                                                int64_t stride) {
    return ((row % period) * cols + col) / stride;
}

// y = (x - mean) * inv_std * scale + bias per row; mean and inv_std (may be null) receive the
// row statistics, bias may be null.
template <typename T>
__device__ void sn_forward_impl(const T* x, const T* scale, const T* bias, T* y, T* mean_out,
                                T* inv_std_out, int64_t rows, int64_t cols, int64_t period, int64_t stride,
                                acc_t<T> epsilon) {
    typedef acc_t<T> A;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * cols;
        A s = 0;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += to_acc(xr[c]);
        const A mean = row_sum(s) / A(cols);
        A s2 = 0;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const A d = to_acc(xr[c]) - mean;
            s2 += d * d;
        }
        const A inv_std = A(1) / sqrt(row_sum(s2) / A(cols) + epsilon);
        if (threadIdx.x == 0) {
            if (mean_out != nullptr) mean_out[row] = from_acc<T>(mean);
            if (inv_std_out != nullptr) inv_std_out[row] = from_acc<T>(inv_std);
        }
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const int64_t p = affine_index(row, c, cols, period, stride);
            A v = (to_acc(xr[c]) - mean) * inv_std * to_acc(scale[p]);
            if (bias != nullptr) v += to_acc(bias[p]);
            y[row * cols + c] = from_acc<T>(v);
        }
    }
}

// dX of a row: inv_std * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale.
template <typename T>
__device__ void sn_grad_input_impl(const T* dy, const T* x, const T* scale, const T* mean,
                                   const T* inv_std, T* dx, int64_t rows, int64_t cols, int64_t period,
                                   int64_t stride) {
    typedef acc_t<T> A;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const int64_t base = row * cols;
        const A m = to_acc(mean[row]), is = to_acc(inv_std[row]);
        A sg = 0, sgx = 0;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const A g = to_acc(dy[base + c]) * to_acc(scale[affine_index(row, c, cols, period, stride)]);
            sg += g;
            sgx += g * (to_acc(x[base + c]) - m) * is;
        }
        const A mean_g = row_sum(sg) / A(cols), mean_gx = row_sum(sgx) / A(cols);
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const A g = to_acc(dy[base + c]) * to_acc(scale[affine_index(row, c, cols, period, stride)]);
            const A xhat = (to_acc(x[base + c]) - m) * is;
            dx[base + c] = from_acc<T>(is * (g - mean_g - xhat * mean_gx));
        }
    }
}

// dscale[p] = sum dy * xhat and dbias[p] = sum dy over the elements of affine entry p: rows
// r0, r0 + period, ... and in each the columns [c0, c0 + stride), where r0 * cols + c0 = p * stride.
// Either output may be null.
template <typename T>
__device__ void sn_grad_params_impl(const T* dy, const T* x, const T* mean, const T* inv_std,
                                    T* dscale, T* dbias, int64_t rows, int64_t cols, int64_t period, int64_t stride,
                                    int64_t params) {
    typedef acc_t<T> A;
    for (int64_t p = blockIdx.x; p < params; p += gridDim.x) {
        const int64_t r0 = p * stride / cols, c0 = p * stride % cols;
        const int64_t count = (rows - r0 + period - 1) / period * stride;
        A sb = 0, ss = 0;
        for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
            const int64_t row = r0 + k / stride * period, i = row * cols + c0 + k % stride;
            const A g = to_acc(dy[i]);
            sb += g;
            ss += g * (to_acc(x[i]) - to_acc(mean[row])) * to_acc(inv_std[row]);
        }
        sb = row_sum(sb);
        ss = row_sum(ss);
        if (threadIdx.x == 0) {
            if (dbias != nullptr) dbias[p] = from_acc<T>(sb);
            if (dscale != nullptr) dscale[p] = from_acc<T>(ss);
        }
    }
}

// The forward pass of rows of at most NARROW_COLS columns, a thread per row.
template <typename T>
__device__ void sn_forward_narrow_impl(const T* x, const T* scale, const T* bias, T* y, T* mean_out,
                                       T* inv_std_out, int64_t rows, int64_t cols, int64_t period, int64_t stride,
                                       acc_t<T> epsilon) {
    typedef acc_t<T> A;
    GRID_STRIDE_LOOP(row, rows) {
        const T* xr = x + row * cols;
        A s = 0;
        for (int64_t c = 0; c < cols; ++c) s += to_acc(xr[c]);
        const A mean = s / A(cols);
        A s2 = 0;
        for (int64_t c = 0; c < cols; ++c) {
            const A d = to_acc(xr[c]) - mean;
            s2 += d * d;
        }
        const A inv_std = A(1) / sqrt(s2 / A(cols) + epsilon);
        if (mean_out != nullptr) mean_out[row] = from_acc<T>(mean);
        if (inv_std_out != nullptr) inv_std_out[row] = from_acc<T>(inv_std);
        for (int64_t c = 0; c < cols; ++c) {
            const int64_t p = affine_index(row, c, cols, period, stride);
            A v = (to_acc(xr[c]) - mean) * inv_std * to_acc(scale[p]);
            if (bias != nullptr) v += to_acc(bias[p]);
            y[row * cols + c] = from_acc<T>(v);
        }
    }
}

// dX of rows of at most NARROW_COLS columns, a thread per row.
template <typename T>
__device__ void sn_grad_input_narrow_impl(const T* dy, const T* x, const T* scale, const T* mean,
                                          const T* inv_std, T* dx, int64_t rows, int64_t cols, int64_t period,
                                          int64_t stride) {
    typedef acc_t<T> A;
    GRID_STRIDE_LOOP(row, rows) {
        const int64_t base = row * cols;
        const A m = to_acc(mean[row]), is = to_acc(inv_std[row]);
        A sg = 0, sgx = 0;
        for (int64_t c = 0; c < cols; ++c) {
            const A g = to_acc(dy[base + c]) * to_acc(scale[affine_index(row, c, cols, period, stride)]);
            sg += g;
            sgx += g * (to_acc(x[base + c]) - m) * is;
        }
        const A mean_g = sg / A(cols), mean_gx = sgx / A(cols);
        for (int64_t c = 0; c < cols; ++c) {
            const A g = to_acc(dy[base + c]) * to_acc(scale[affine_index(row, c, cols, period, stride)]);
            const A xhat = (to_acc(x[base + c]) - m) * is;
            dx[base + c] = from_acc<T>(is * (g - mean_g - xhat * mean_gx));
        }
    }
}

// Per-block partial sums of dbias (sum dy) and dscale (sum dy * xhat) of each column, for rows of
// at most NARROW_COLS columns whose affine entry is their column (period and stride 1): block b
// sums rows [b * rows_per_block, ...) into part_bias[b * cols + c] and part_scale[b * cols + c].
template <typename T>
__device__ void sn_grad_params_narrow_impl(const T* dy, const T* x, const T* mean, const T* inv_std,
                                           acc_t<T>* part_bias, acc_t<T>* part_scale, int64_t rows, int64_t cols,
                                           int64_t rows_per_block) {
    typedef acc_t<T> A;
    A sb[NARROW_COLS], ss[NARROW_COLS];
#pragma unroll
    for (int c = 0; c < NARROW_COLS; ++c) sb[c] = ss[c] = A(0);
    const int64_t begin = blockIdx.x * rows_per_block;
    const int64_t end = begin + rows_per_block < rows ? begin + rows_per_block : rows;
    for (int64_t row = begin + threadIdx.x; row < end; row += blockDim.x) {
        const A m = to_acc(mean[row]), is = to_acc(inv_std[row]);
#pragma unroll
        for (int c = 0; c < NARROW_COLS; ++c) {
            if (c < cols) {
                const A g = to_acc(dy[row * cols + c]);
                sb[c] += g;
                ss[c] += g * (to_acc(x[row * cols + c]) - m) * is;
            }
        }
    }
#pragma unroll
    for (int c = 0; c < NARROW_COLS; ++c) {
        if (c < cols) {     // the same for every thread of the block, as row_sum needs
            const A b = row_sum(sb[c]), s = row_sum(ss[c]);
            if (threadIdx.x == 0) {
                part_bias[blockIdx.x * cols + c] = b;
                part_scale[blockIdx.x * cols + c] = s;
            }
        }
    }
}

#define SAMPLE_NORM(T, S)                                                                                       \
    extern "C" __global__ void sn_forward_##S(const T* x, const T* scale, const T* bias, T* y, T* mean,         \
                                              T* inv_std, int64_t rows, int64_t cols, int64_t period,    \
                                              int64_t stride, acc_t<T> epsilon) {                               \
        sn_forward_impl<T>(x, scale, bias, y, mean, inv_std, rows, cols, period, stride, epsilon);              \
    }                                                                                                           \
    extern "C" __global__ void sn_grad_input_##S(const T* dy, const T* x, const T* scale, const T* mean, \
                                                 const T* inv_std, T* dx, int64_t rows, int64_t cols,    \
                                                 int64_t period, int64_t stride) {                              \
        sn_grad_input_impl<T>(dy, x, scale, mean, inv_std, dx, rows, cols, period, stride);                     \
    }                                                                                                           \
    extern "C" __global__ void sn_grad_params_##S(const T* dy, const T* x, const T* mean,                \
                                                  const T* inv_std, T* dscale, T* dbias, int64_t rows,   \
                                                  int64_t cols, int64_t period, int64_t stride, int64_t params) { \
        sn_grad_params_impl<T>(dy, x, mean, inv_std, dscale, dbias, rows, cols, period, stride, params);        \
    }                                                                                                           \
    extern "C" __global__ void sn_forward_narrow_##S(const T* x, const T* scale, const T* bias, T* y, T* mean,  \
                                                     T* inv_std, int64_t rows, int64_t cols, int64_t period,    \
                                                     int64_t stride, acc_t<T> epsilon) {                        \
        sn_forward_narrow_impl<T>(x, scale, bias, y, mean, inv_std, rows, cols, period, stride, epsilon);       \
    }                                                                                                           \
    extern "C" __global__ void sn_grad_input_narrow_##S(const T* dy, const T* x, const T* scale, const T* mean, \
                                                        const T* inv_std, T* dx, int64_t rows, int64_t cols,    \
                                                        int64_t period, int64_t stride) {                       \
        sn_grad_input_narrow_impl<T>(dy, x, scale, mean, inv_std, dx, rows, cols, period, stride);              \
    }                                                                                                           \
    extern "C" __global__ void sn_grad_params_narrow_##S(const T* dy, const T* x, const T* mean,               \
                                                         const T* inv_std, acc_t<T>* part_bias,                 \
                                                         acc_t<T>* part_scale, int64_t rows, int64_t cols,      \
                                                         int64_t rows_per_block) {                              \
        sn_grad_params_narrow_impl<T>(dy, x, mean, inv_std, part_bias, part_scale, rows, cols, rows_per_block); \
    }

MT_FOR_FLOATS(SAMPLE_NORM)
