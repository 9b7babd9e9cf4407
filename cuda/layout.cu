// Re-layout kernels: the strided copy behind make_contiguous and the structural ops' copies
// (Concat, Split, Slice, SliceGrad, Expand, Tile, Pad's interior, Transpose).
//
// A copy only moves elements, so it is instantiated per element width (1, 2, 4 and 8 bytes:
// strided_copy_w1 ... _w8) rather than per float type: it serves int64 indices and bool masks
// as well as the float tensors.
#include "common.cuh"
#include "strided.cuh"

// dst[off1] = src[off0] for every index i of the plan's dense index space.
template <typename T>
__device__ void strided_copy_impl(const T* src, T* dst, int64_t n, int rank, const StridedPlan<2>& plan) {
    GRID_STRIDE_LOOP(i, n) {
        int64_t off[2];
        strided_offsets<2>(plan, rank, i, off);
        dst[off[1]] = src[off[0]];
    }
}

#define STRIDED_COPY(T, W)                                                                          \
    extern "C" __global__ void strided_copy_w##W(const T* src, T* dst, int64_t n, int rank,         \
                                                 StridedPlan<2> plan) {                             \
        strided_copy_impl<T>(src, dst, n, rank, plan);                                              \
    }
STRIDED_COPY(uint8_t, 1)
STRIDED_COPY(uint16_t, 2)
STRIDED_COPY(uint32_t, 4)
STRIDED_COPY(uint64_t, 8)
