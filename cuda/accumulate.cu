// InPlaceAccumulator: buffer += scale * value, written in place (gradient accumulation).
#include "common.cuh"

template <typename T> __device__ void accumulate_impl(T* buffer, const T* value, int64_t n, acc_t<T> scale) {
    GRID_STRIDE_LOOP(i, n) buffer[i] = from_acc<T>(to_acc<T>(buffer[i]) + scale * to_acc<T>(value[i]));
}

#define ACCUMULATE(T, S)                                                                             \
    extern "C" __global__ void accumulate_##S(T* buffer, const T* value, int64_t n, acc_t<T> scale) { \
        accumulate_impl<T>(buffer, value, n, scale);                                                 \
    }
MT_FOR_FLOATS(ACCUMULATE)
