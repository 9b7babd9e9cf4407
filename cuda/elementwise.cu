// Broadcasting arithmetic (Add, Sub, Mul, Div), Neg, and SumToShape's reduction over the
// broadcast axes.
//
// Each binary op has two kernels: <op>_<T> for operands of the output's shape (flat, 16-byte
// packs when aligned: elementwise_map.cuh) and <op>_bcast_<T>, which finds both operands'
// offsets from a StridedPlan<2> over the output (stride 0 along an operand's broadcast axes).
// SumToShape sums in the accumulation type (float for half): sum_rows_<T> when the summed axes
// include x's innermost one (a block per output, reading along it), sum_cols_<T> otherwise
// (32 adjacent outputs per block, whose reads are adjacent too), and sum_narrow_cols_<T> for a
// dense (r, m) x of few columns m (bias gradients over many rows): a block's threads read its
// range of rows as one flat run, each thread keeping to one column, into per-block partials
// that sum_slices (conv.cu) adds.  All sum in a fixed order, so results are the same run to run.
#include "common.cuh"
#include "elementwise_map.cuh"
#include "strided.cuh"

struct AddOp { template <typename A> __device__ A operator()(A a, A b) const { return a + b; } };
struct SubOp { template <typename A> __device__ A operator()(A a, A b) const { return a - b; } };
struct MulOp { template <typename A> __device__ A operator()(A a, A b) const { return a * b; } };
struct DivOp { template <typename A> __device__ A operator()(A a, A b) const { return a / b; } };
struct NegOp { template <typename A> __device__ A operator()(A a) const { return -a; } };

template <typename T, typename F>
__device__ void binary_bcast_impl(const T* a, const T* b, T* c, int64_t n, int rank, const StridedPlan<2>& plan, F f) {
    GRID_STRIDE_LOOP(i, n) {
        int64_t off[2];
        strided_offsets<2>(plan, rank, i, off);
        c[i] = from_acc<T>(f(to_acc<T>(a[off[0]]), to_acc<T>(b[off[1]])));
    }
}

#define BINARY(T, S, NAME, OP)                                                                      \
    extern "C" __global__ void NAME##_##S(const T* a, const T* b, T* c, int64_t n) {                \
        map2<T>(a, b, c, n, OP());                                                                  \
    }                                                                                               \
    extern "C" __global__ void NAME##_bcast_##S(const T* a, const T* b, T* c, int64_t n, int rank,  \
                                                StridedPlan<2> plan) {                              \
        binary_bcast_impl<T>(a, b, c, n, rank, plan, OP());                                         \
    }
#define ARITHMETIC(T, S)                                                                            \
    BINARY(T, S, add, AddOp) BINARY(T, S, sub, SubOp) BINARY(T, S, mul, MulOp) BINARY(T, S, div, DivOp) \
    extern "C" __global__ void neg_##S(const T* x, T* y, int64_t n) { map1<T>(x, y, n, NegOp()); }
MT_FOR_FLOATS(ARITHMETIC)

// ----------------------------------------------------------------------------- SumToShape
// Output o (dense over the kept axes, y's layout) sums x over the reduced index space;
// `kept` and `reduced` carry x's element strides.

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024), in thread 0.
template <typename A>
__device__ __forceinline__ A block_sum(A v, A* partial) {
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    if (warps == 1) return v;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < warps ? partial[lane] : A(0);
    if (warp == 0) {
#pragma unroll
        for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s);
    }
    __syncthreads();    // partial is reused by the block's next output
    return v;
}

template <typename T>
__device__ void sum_rows_impl(const T* x, T* y, int64_t m, int64_t r, int krank, const StridedPlan<1>& kept,
                              int rrank, const StridedPlan<1>& reduced) {
    typedef acc_t<T> A;
    __shared__ A partial[32];
    for (int64_t o = blockIdx.x; o < m; o += gridDim.x) {
        int64_t base[1];
        strided_offsets<1>(kept, krank, o, base);
        A s = 0;
        for (int64_t j = threadIdx.x; j < r; j += blockDim.x) {
            int64_t off[1];
            strided_offsets<1>(reduced, rrank, j, off);
            s += to_acc<T>(x[base[0] + off[0]]);
        }
        s = block_sum<A>(s, partial);
        if (threadIdx.x == 0) y[o] = from_acc<T>(s);
    }
}

// blockDim (32, SUM_COLS_SPLIT): threadIdx.x picks one of 32 adjacent outputs, threadIdx.y
// one of SUM_COLS_SPLIT interleaved parts of its reduced range.  With gridDim.y > 1 the reduced
// range is cut into gridDim.y slices of `slice` indices and block row b writes the partial sums
// of slice b to y[b * m + o]: a second pass (slice = r) sums those rows in a fixed order.
#ifndef MT_SUM_COLS_SPLIT
#error "MT_SUM_COLS_SPLIT comes from minitrain/providers/cuda/launch.py (nvcc -DMT_SUM_COLS_SPLIT=...)"
#endif
#define SUM_COLS_SPLIT MT_SUM_COLS_SPLIT
template <typename T>
__device__ void sum_cols_impl(const T* x, T* y, int64_t m, int64_t r, int krank, const StridedPlan<1>& kept,
                              int rrank, const StridedPlan<1>& reduced, int64_t slice) {
    typedef acc_t<T> A;
    __shared__ A partial[SUM_COLS_SPLIT][32];
    const int64_t begin = (int64_t)blockIdx.y * slice, end = begin + slice < r ? begin + slice : r;
    y += (int64_t)blockIdx.y * m;
    for (int64_t first = (int64_t)blockIdx.x * 32; first < m; first += (int64_t)gridDim.x * 32) {
        const int64_t o = first + threadIdx.x;
        A s = 0;
        if (o < m) {
            int64_t base[1];
            strided_offsets<1>(kept, krank, o, base);
            for (int64_t j = begin + threadIdx.y; j < end; j += SUM_COLS_SPLIT) {
                int64_t off[1];
                strided_offsets<1>(reduced, rrank, j, off);
                s += to_acc<T>(x[base[0] + off[0]]);
            }
        }
        partial[threadIdx.y][threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.y == 0 && o < m) {
            A total = 0;
#pragma unroll
            for (int k = 0; k < SUM_COLS_SPLIT; ++k) total += partial[k][threadIdx.x];
            y[o] = from_acc<T>(total);
        }
        __syncthreads();
    }
}

// part[b * m + c] = the sum of column c of x (r rows of m) over rows [b * rows_per_block, ...);
// blockDim.x is a multiple of m, so each thread's flat index keeps one column.
template <typename T>
__device__ void sum_narrow_cols_impl(const T* x, acc_t<T>* part, int64_t r, int64_t m, int64_t rows_per_block) {
    typedef acc_t<T> A;
    extern __shared__ unsigned char narrow_shared[];
    A* sums = reinterpret_cast<A*>(narrow_shared);
    const int64_t begin = blockIdx.x * rows_per_block * m;
    const int64_t end = min(r, (int64_t)(blockIdx.x + 1) * rows_per_block) * m;
    A s = 0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) s += to_acc<T>(x[i]);
    sums[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x < m) {
        A total = 0;
        for (int k = threadIdx.x; k < (int)blockDim.x; k += (int)m) total += sums[k];
        part[blockIdx.x * m + threadIdx.x] = total;
    }
}

#define SUM_TO_SHAPE(T, S)                                                                          \
    extern "C" __global__ void sum_rows_##S(const T* x, T* y, int64_t m, int64_t r, int krank,      \
                                            StridedPlan<1> kept, int rrank, StridedPlan<1> reduced) { \
        sum_rows_impl<T>(x, y, m, r, krank, kept, rrank, reduced);                                  \
    }                                                                                               \
    extern "C" __global__ void sum_cols_##S(const T* x, T* y, int64_t m, int64_t r, int krank,      \
                                            StridedPlan<1> kept, int rrank, StridedPlan<1> reduced, \
                                            int64_t slice) {                                        \
        sum_cols_impl<T>(x, y, m, r, krank, kept, rrank, reduced, slice);                           \
    }                                                                                               \
    extern "C" __global__ void sum_narrow_cols_##S(const T* x, acc_t<T>* part, int64_t r, int64_t m, \
                                                   int64_t rows_per_block) {                        \
        sum_narrow_cols_impl<T>(x, part, r, m, rows_per_block);                                     \
    }
MT_FOR_FLOATS(SUM_TO_SHAPE)
