// ConcatFlat: one input, times a scale, copied into its place of the flat buffer (the fused
// gradient buffer of data parallelism; a scale of 1 is a plain copy and needs no kernel).
#include "common.cuh"

template <typename T> __device__ void scale_copy_impl(T* out, const T* in, int64_t n, acc_t<T> scale) {
    GRID_STRIDE_LOOP(i, n) out[i] = from_acc<T>(to_acc<T>(in[i]) * scale);
}

#define SCALE_COPY(T, S)                                                                                \
    extern "C" __global__ void scale_copy_##S(T* out, const T* in, int64_t n, acc_t<T> scale) {       \
        scale_copy_impl<T>(out, in, n, scale);                                                          \
    }
MT_FOR_FLOATS(SCALE_COPY)
