// Per-sample normalisations (LayerNormalization, InstanceNormalization, GroupNormalization) and
// their gradients over X viewed as a contiguous (rows, cols) buffer, each row normalised with its
// own mean and biased variance.  The affine entry of element (row, col) is
// ((row % period) * cols + col) / stride (ops/sample_normalization.py's layout).
//
// A block per row (grid-stride over rows) for the forward pass and dX; a block per affine entry
// for dscale and dbias.  Sums in acc_t<T> (float for half); the statistics are stored as T.
// The variance is taken in a second pass over the row, of x - mean, so nothing cancels.
#include "common.cuh"

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
    }

MT_FOR_FLOATS(SAMPLE_NORM)
