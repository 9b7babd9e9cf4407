// InPlaceAccumulator: buffer += scale * value, written in place (gradient accumulation).  The
// scale is read from device memory (1 when absent), so a captured step follows it.  A float32
// buffer also accumulates a float16 or bfloat16 value (value_type MT_GRAD_HALF / MT_GRAD_BF16, 0
// for the buffer's own type), each element widened exactly as it is read.
// InPlaceAccumulatorV2: buffer = value where the overwrite flag (device memory, false when
// absent) is true, buffer += value otherwise: a captured step follows lazy_reset_grad.
#include "common.cuh"
#include "multi_tensor.cuh"

template <typename T>
__device__ void accumulate_impl(T* buffer, const void* value, int64_t n, const T* scale, int value_type) {
    const acc_t<T> factor = scale ? to_acc<T>(scale[0]) : acc_t<T>(1);
    with_gradient_type<T>(value, value_type, [&](auto v) {
        GRID_STRIDE_LOOP(i, n) buffer[i] = from_acc<T>(to_acc<T>(buffer[i]) + factor * (acc_t<T>)to_acc(v[i]));
    });
}

#define ACCUMULATE(T, S)                                                                                 \
    extern "C" __global__ void accumulate_##S(T* buffer, const void* value, int64_t n, const T* scale,   \
                                              int value_type) {                                          \
        accumulate_impl<T>(buffer, value, n, scale, value_type);                                         \
    }
MT_FOR_FLOATS(ACCUMULATE)

template <typename T> __device__ void accumulate_v2_impl(T* buffer, const T* value, int64_t n, const bool* overwrite) {
    const bool replace = overwrite && overwrite[0];
    GRID_STRIDE_LOOP(i, n) buffer[i] = replace ? value[i] : from_acc<T>(to_acc<T>(buffer[i]) + to_acc<T>(value[i]));
}

#define ACCUMULATE_V2(T, S)                                                                                 \
    extern "C" __global__ void accumulate_v2_##S(T* buffer, const T* value, int64_t n, const bool* overwrite) { \
        accumulate_v2_impl<T>(buffer, value, n, overwrite);                                                 \
    }
MT_FOR_FLOATS(ACCUMULATE_V2)
