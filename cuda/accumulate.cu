// InPlaceAccumulator: buffer += scale * value, written in place (gradient accumulation).  The
// scale is read from device memory (1 when absent), so a captured step follows it.
#include "common.cuh"

template <typename T> __device__ void accumulate_impl(T* buffer, const T* value, int64_t n, const T* scale) {
    const acc_t<T> factor = scale ? to_acc<T>(scale[0]) : acc_t<T>(1);
    GRID_STRIDE_LOOP(i, n) buffer[i] = from_acc<T>(to_acc<T>(buffer[i]) + factor * to_acc<T>(value[i]));
}

#define ACCUMULATE(T, S)                                                                              \
    extern "C" __global__ void accumulate_##S(T* buffer, const T* value, int64_t n, const T* scale) { \
        accumulate_impl<T>(buffer, value, n, scale);                                                  \
    }
MT_FOR_FLOATS(ACCUMULATE)
