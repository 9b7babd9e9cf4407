// ReduceSum, ReduceMean and ReduceMax over any axes, in the accumulation type (float for the
// 16-bit types).
//
// The host collapses the kept and the reduced dims into two StridedPlan<1>s over x (minitrain/
// providers/cuda/reduce.py).  reduce_rows_<op>_<T>: a block per output, its threads striding
// over the reduced range (the reduced axes hold x's innermost one, so the reads are adjacent);
// reduce_cols_<op>_<T>: a thread per output, adjacent threads on adjacent outputs.  Both reduce
// in a fixed order, so results are the same run to run; a row's threads combine their sums in
// double (block_sum.cuh, as ReduceSumSquare does).  The sum is scaled on the way out: by 1
// for ReduceSum (0 over an empty range), by 1 / count for ReduceMean (NaN over an empty range).
// Max starts from -inf (ONNX's value over an empty range) and lets NaN through, as NumPy does.
#include <math.h>
#include "common.cuh"
#include "block_sum.cuh"
#include "strided.cuh"

// The max of every thread's v, returned to thread 0 (blockDim.x a power of two, at most 1024),
// NaN winning as in MaxOp.  Every thread of the block must call it; it may be called again.
template <typename A>
__device__ __forceinline__ A block_max(A v) {
    __shared__ A partial[32];
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) {
        const A b = __shfl_xor_sync(0xffffffffu, v, s);
        v = (isnan(b) || b > v) ? b : v;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
    if (warps == 1) return v;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < warps ? partial[lane] : A(-INFINITY);
    if (warp == 0) {
#pragma unroll
        for (int s = 16; s > 0; s >>= 1) {
            const A b = __shfl_xor_sync(0xffffffffu, v, s);
            v = (isnan(b) || b > v) ? b : v;
        }
    }
    __syncthreads();    // partial is reused by the block's next output
    return v;
}

// first: the value over an empty range; apply: one more element; block: the block's threads
// combined, in thread 0.
struct SumOp {
    template <typename A> __device__ static A first() { return A(0); }
    template <typename A> __device__ static A apply(A a, A b) { return a + b; }
    template <typename A> __device__ static A block(A v) { return (A)block_sum((double)v); }
};
struct MaxOp {
    template <typename A> __device__ static A first() { return -INFINITY; }
    template <typename A> __device__ static A apply(A a, A b) { return (isnan(b) || b > a) ? b : a; }
    template <typename A> __device__ static A block(A v) { return block_max<A>(v); }
};

template <typename Op, typename T>
__device__ void reduce_rows_impl(const T* x, T* y, int64_t m, int64_t r, acc_t<T> scale, int krank,
                                 const StridedPlan<1>& kept, int rrank, const StridedPlan<1>& reduced) {
    typedef acc_t<T> A;
    for (int64_t o = blockIdx.x; o < m; o += gridDim.x) {
        int64_t base[1];
        strided_offsets<1>(kept, krank, o, base);
        A s = Op::template first<A>();
        for (int64_t j = threadIdx.x; j < r; j += blockDim.x) {
            int64_t off[1];
            strided_offsets<1>(reduced, rrank, j, off);
            s = Op::apply(s, to_acc<T>(x[base[0] + off[0]]));
        }
        s = Op::template block<A>(s);
        if (threadIdx.x == 0) y[o] = from_acc<T>(s * scale);
    }
}

template <typename Op, typename T>
__device__ void reduce_cols_impl(const T* x, T* y, int64_t m, int64_t r, acc_t<T> scale, int krank,
                                 const StridedPlan<1>& kept, int rrank, const StridedPlan<1>& reduced) {
    typedef acc_t<T> A;
    GRID_STRIDE_LOOP(o, m) {
        int64_t base[1];
        strided_offsets<1>(kept, krank, o, base);
        A s = Op::template first<A>();
        for (int64_t j = 0; j < r; ++j) {
            int64_t off[1];
            strided_offsets<1>(reduced, rrank, j, off);
            s = Op::apply(s, to_acc<T>(x[base[0] + off[0]]));
        }
        y[o] = from_acc<T>(s * scale);
    }
}

#define REDUCE_OP(T, S, NAME, OP)                                                                   \
    extern "C" __global__ void reduce_rows_##NAME##_##S(const T* x, T* y, int64_t m, int64_t r,     \
                                                        acc_t<T> scale, int krank, StridedPlan<1> kept, \
                                                        int rrank, StridedPlan<1> reduced) {        \
        reduce_rows_impl<OP, T>(x, y, m, r, scale, krank, kept, rrank, reduced);                    \
    }                                                                                               \
    extern "C" __global__ void reduce_cols_##NAME##_##S(const T* x, T* y, int64_t m, int64_t r,     \
                                                        acc_t<T> scale, int krank, StridedPlan<1> kept, \
                                                        int rrank, StridedPlan<1> reduced) {        \
        reduce_cols_impl<OP, T>(x, y, m, r, scale, krank, kept, rrank, reduced);                    \
    }
#define REDUCE(T, S) REDUCE_OP(T, S, sum, SumOp) REDUCE_OP(T, S, max, MaxOp)
MT_FOR_FLOATS(REDUCE)
