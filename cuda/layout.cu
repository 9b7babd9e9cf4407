// Re-layout kernels: the strided gather behind make_contiguous.
//
// A gather only moves elements, so it is instantiated per element width (1, 2, 4 and 8
// bytes: strided_copy_w1 ... _w8) rather than per float type: it serves int64 indices and
// bool masks as well as the float tensors.
#include "common.cuh"
#include "strided.cuh"

// dst[i] = src[offset of i], for i over the dense index space of the plan (dst's shape).
template <typename T>
__device__ void strided_copy_impl(const T* src, T* dst, int64_t n, int rank, const StridedPlan<1>& plan) {
    GRID_STRIDE_LOOP(i, n) {
        int64_t off[1];
        strided_offsets<1>(plan, rank, i, off);
        dst[i] = src[off[0]];
    }
}

#define STRIDED_COPY(T, W)                                                                          \
    extern "C" __global__ void strided_copy_w##W(const T* src, T* dst, int64_t n, int rank,         \
                                                 StridedPlan<1> plan) {                             \
        strided_copy_impl<T>(src, dst, n, rank, plan);                                              \
    }
STRIDED_COPY(uint8_t, 1)
STRIDED_COPY(uint16_t, 2)
STRIDED_COPY(uint32_t, 4)
STRIDED_COPY(uint64_t, 8)
