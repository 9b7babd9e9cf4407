// Comparisons, And and Where: the mask-making ops of the gradients (Clip's, ReduceMax's,
// Max/Min's, PRelu's) and of imported graphs.  Every kernel walks a StridedPlan over the
// output (broadcasting included; operands of the output's shape collapse to one dim).
//   <cmp>_<T>(a, b, c): c = a <cmp> b as bool, for equal, less, greater, less_equal, greater_equal
//   logical_and_<T>: bool operands (instantiated per element type like the others; T unused)
//   where_<T>(condition, x, y, out)
#include "common.cuh"
#include "strided.cuh"

struct Equal { template <typename A> __device__ bool operator()(A a, A b) const { return a == b; } };
struct Less { template <typename A> __device__ bool operator()(A a, A b) const { return a < b; } };
struct Greater { template <typename A> __device__ bool operator()(A a, A b) const { return a > b; } };
struct LessEqual { template <typename A> __device__ bool operator()(A a, A b) const { return a <= b; } };
struct GreaterEqual { template <typename A> __device__ bool operator()(A a, A b) const { return a >= b; } };

template <typename T, typename F>
__device__ void compare_impl(const T* a, const T* b, bool* c, int64_t n, int rank, const StridedPlan<2>& plan, F f) {
    GRID_STRIDE_LOOP(i, n) {
        int64_t off[2];
        strided_offsets<2>(plan, rank, i, off);
        c[i] = f(to_acc<T>(a[off[0]]), to_acc<T>(b[off[1]]));
    }
}

__device__ void and_impl(const bool* a, const bool* b, bool* c, int64_t n, int rank, const StridedPlan<2>& plan) {
    GRID_STRIDE_LOOP(i, n) {
        int64_t off[2];
        strided_offsets<2>(plan, rank, i, off);
        c[i] = a[off[0]] && b[off[1]];
    }
}

template <typename T>
__device__ void where_impl(const bool* condition, const T* x, const T* y, T* out, int64_t n, int rank,
                           const StridedPlan<3>& plan) {
    GRID_STRIDE_LOOP(i, n) {
        int64_t off[3];
        strided_offsets<3>(plan, rank, i, off);
        out[i] = condition[off[0]] ? x[off[1]] : y[off[2]];
    }
}

#define COMPARE(T, S, NAME, OP)                                                                     \
    extern "C" __global__ void NAME##_##S(const T* a, const T* b, bool* c, int64_t n, int rank,     \
                                          StridedPlan<2> plan) {                                    \
        compare_impl<T>(a, b, c, n, rank, plan, OP());                                              \
    }
#define LOGIC(T, S)                                                                                 \
    COMPARE(T, S, equal, Equal) COMPARE(T, S, less, Less) COMPARE(T, S, greater, Greater)           \
    COMPARE(T, S, less_equal, LessEqual) COMPARE(T, S, greater_equal, GreaterEqual)                 \
    extern "C" __global__ void logical_and_##S(const bool* a, const bool* b, bool* c, int64_t n, int rank, \
                                               StridedPlan<2> plan) {                               \
        and_impl(a, b, c, n, rank, plan);                                                           \
    }                                                                                               \
    extern "C" __global__ void where_##S(const bool* condition, const T* x, const T* y, T* out, int64_t n, \
                                         int rank, StridedPlan<3> plan) {                           \
        where_impl<T>(condition, x, y, out, n, rank, plan);                                         \
    }
MT_FOR_FLOATS(LOGIC)
