// ReduceSumSquare and ReduceL2: one block per output sums the squares of x over the reduced
// index space (StridedPlans over x's kept and reduced dims, as cuda/elementwise.cu's SumToShape
// takes them), in double through block_sum.cuh, so the result is the same run to run; with
// `root` the output is the square root of the sum.  Nothing reduced (r = 1 over a plan of rank
// 0) is the elementwise x * x, or |x|.
#include "common.cuh"
#include "block_sum.cuh"
#include "strided.cuh"

template <typename T>
__device__ void sum_square_impl(const T* x, T* y, int64_t m, int64_t r, int krank, const StridedPlan<1>& kept,
                                int rrank, const StridedPlan<1>& reduced, int root) {
    for (int64_t o = blockIdx.x; o < m; o += gridDim.x) {
        int64_t base[1];
        strided_offsets<1>(kept, krank, o, base);
        double s = 0.0;
        for (int64_t j = threadIdx.x; j < r; j += blockDim.x) {
            int64_t off[1];
            strided_offsets<1>(reduced, rrank, j, off);
            const double v = (double)to_acc<T>(x[base[0] + off[0]]);
            s += v * v;
        }
        s = block_sum(s);
        if (threadIdx.x == 0) y[o] = from_acc<T>((acc_t<T>)(root ? sqrt(s) : s));
    }
}

#define REDUCE_NORM(T, S)                                                                           \
    extern "C" __global__ void sum_square_##S(const T* x, T* y, int64_t m, int64_t r, int krank,    \
                                              StridedPlan<1> kept, int rrank, StridedPlan<1> reduced, int root) { \
        sum_square_impl<T>(x, y, m, r, krank, kept, rrank, reduced, root);                          \
    }
MT_FOR_FLOATS(REDUCE_NORM)
