// OneHot: output (outer, depth, inner) is values[1] where the index of (outer, inner) is the
// class, values[0] elsewhere; an index outside the range gives a row of values[0], as the CPU
// kernel does, so nothing is reported and nothing waits for the host.  `negative_from_end`
// (opset 11) counts an index in [-depth, 0) from the end.
#include "common.cuh"

template <typename T, typename I>
__device__ void one_hot_impl(const I* indices, const T* values, T* y, int64_t n, int64_t depth, int64_t inner,
                             int negative_from_end) {
    GRID_STRIDE_LOOP(i, n) {
        const int64_t r = i % inner, c = (i / inner) % depth, outer = i / (inner * depth);
        int64_t index = (int64_t)indices[outer * inner + r];
        if (negative_from_end && index < 0) index += depth;
        y[i] = values[index == c ? 1 : 0];
    }
}

#define ONE_HOT(T, S)                                                                               \
    extern "C" __global__ void one_hot_i64_##S(const int64_t* indices, const T* values, T* y, int64_t n, \
                                               int64_t depth, int64_t inner, int negative_from_end) { \
        one_hot_impl<T, int64_t>(indices, values, y, n, depth, inner, negative_from_end);           \
    }                                                                                               \
    extern "C" __global__ void one_hot_i32_##S(const int32_t* indices, const T* values, T* y, int64_t n, \
                                               int64_t depth, int64_t inner, int negative_from_end) { \
        one_hot_impl<T, int32_t>(indices, values, y, n, depth, inner, negative_from_end);           \
    }
MT_FOR_FLOATS(ONE_HOT)
