// Gemm's bias: C broadcast to the (m, n) output before cuBLAS adds the product to it.
#include "common.cuh"

// y[i, j] = scale * c[i * sm + j * sn], sm / sn 0 along a broadcast axis of C.
template <typename T>
__device__ void gemm_bias_impl(const T* c, T* y, int64_t m, int64_t n, int64_t sm, int64_t sn, acc_t<T> scale) {
    GRID_STRIDE_LOOP(idx, m * n) {
        const int64_t i = idx / n, j = idx - i * n;
        y[idx] = from_acc<T>(scale * to_acc<T>(c[i * sm + j * sn]));
    }
}

#define GEMM_BIAS(T, S)                                                                              \
    extern "C" __global__ void gemm_bias_##S(const T* c, T* y, int64_t m, int64_t n, int64_t sm,   \
                                             int64_t sn, acc_t<T> scale) {                         \
        gemm_bias_impl<T>(c, y, m, n, sm, sn, scale);                                              \
    }
MT_FOR_FLOATS(GEMM_BIAS)
