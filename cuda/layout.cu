// Re-layout kernels: the strided copy behind make_contiguous and the structural ops' copies
// (Slice, SliceGrad, Expand, Tile, Pad's interior, Transpose), and the pieces kernels of Concat
// and Split.
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

// Concat and Split of dense tensors along one axis, up to four pieces a launch.  Every tensor is
// seen as `outer` rows: the whole tensor's row is `row` elements long, and piece j's row is w_j
// elements at column first + (the widths of the pieces before it) of the whole row.  A launch
// covers outer x (w0 + w1 + w2 + w3) elements; unused pieces have width 0, and Split skips a
// piece whose pointer is null (an output nobody reads).
struct Piece {
    int64_t column;     // in the piece's row
    int64_t width;      // of the piece's row
    int index;
};

// Which piece column c of a launch's span falls in (in registers: no per-thread arrays).
__device__ __forceinline__ Piece piece_at(int64_t c, int64_t w0, int64_t w1, int64_t w2, int64_t w3) {
    if (c < w0) return {c, w0, 0};
    c -= w0;
    if (c < w1) return {c, w1, 1};
    c -= w1;
    if (c < w2) return {c, w2, 2};
    return {c - w2, w3, 3};
}

template <typename P>
__device__ __forceinline__ P piece_pointer(int index, P p0, P p1, P p2, P p3) {
    return index == 0 ? p0 : index == 1 ? p1 : index == 2 ? p2 : p3;
}

#define PIECES(T, W)                                                                                \
    extern "C" __global__ void concat_pieces_w##W(T* whole, int64_t row, int64_t first, int64_t outer, \
                                                  const T* p0, const T* p1, const T* p2, const T* p3,  \
                                                  int64_t w0, int64_t w1, int64_t w2, int64_t w3) {    \
        const int64_t span = w0 + w1 + w2 + w3;                                                     \
        GRID_STRIDE_LOOP(i, outer * span) {                                                         \
            const int64_t r = i / span, c = i - r * span;                                           \
            const Piece at = piece_at(c, w0, w1, w2, w3);                                           \
            whole[r * row + first + c] = piece_pointer(at.index, p0, p1, p2, p3)[r * at.width + at.column]; \
        }                                                                                           \
    }                                                                                               \
    extern "C" __global__ void split_pieces_w##W(const T* whole, int64_t row, int64_t first, int64_t outer, \
                                                 T* p0, T* p1, T* p2, T* p3,                        \
                                                 int64_t w0, int64_t w1, int64_t w2, int64_t w3) {  \
        const int64_t span = w0 + w1 + w2 + w3;                                                     \
        GRID_STRIDE_LOOP(i, outer * span) {                                                         \
            const int64_t r = i / span, c = i - r * span;                                           \
            const Piece at = piece_at(c, w0, w1, w2, w3);                                           \
            T* piece = piece_pointer(at.index, p0, p1, p2, p3);                                     \
            if (piece != nullptr) piece[r * at.width + at.column] = whole[r * row + first + c];      \
        }                                                                                           \
    }
PIECES(uint8_t, 1)
PIECES(uint16_t, 2)
PIECES(uint32_t, 4)
PIECES(uint64_t, 8)
