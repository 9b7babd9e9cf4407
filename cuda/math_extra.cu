// Elementwise math beyond arithmetic, in the accumulation type, with the CPU kernels' NaN
// behaviour (minitrain/providers/cpu/unary_math.py, clip.py, min_max.py, prelu.py, expand.py):
//   unary (flat, 16-byte packs): abs, sign, log, exp, sqrt, erf, reciprocal
//   binary with broadcasting: pow, max, min (NaN wins, as np.maximum), prelu (x > 0 ? x : x slope)
//     <op>_<T> for operands of the output's shape, <op>_bcast_<T> over a StridedPlan<2>
//   clip_<T>: bounds as scalars (Clip-6's attributes); clip_bounds_<T>: bounds read from device
//     pointers, either null when absent (Clip-11+'s optional inputs, so nothing leaves the device)
//   scale_<T>: x * s, or x / s (com.microsoft Scale, s from host memory)
#include "common.cuh"
#include "elementwise_map.cuh"
#include "math_acc.cuh"
#include "strided.cuh"

struct AbsOp { template <typename A> __device__ A operator()(A x) const { return fabs(x); } };
struct SignOp { template <typename A> __device__ A operator()(A x) const { return x > A(0) ? A(1) : (x < A(0) ? A(-1) : x); } };
struct LogOp { template <typename A> __device__ A operator()(A x) const { return log_acc(x); } };
struct ExpOp { template <typename A> __device__ A operator()(A x) const { return exp_acc(x); } };
struct SqrtOp { template <typename A> __device__ A operator()(A x) const { return sqrt_acc(x); } };
struct ErfOp { template <typename A> __device__ A operator()(A x) const { return erf_acc(x); } };
struct ReciprocalOp { template <typename A> __device__ A operator()(A x) const { return A(1) / x; } };

struct PowOp { template <typename A> __device__ A operator()(A a, A b) const { return pow_acc(a, b); } };
struct MaxOp { template <typename A> __device__ A operator()(A a, A b) const { return a != a || a > b ? a : b; } };
struct MinOp { template <typename A> __device__ A operator()(A a, A b) const { return a != a || a < b ? a : b; } };
struct PReluOp { template <typename A> __device__ A operator()(A x, A slope) const { return x > A(0) ? x : x * slope; } };

// min(max(x, low), high): with low > high every element becomes high, NaN stays NaN.
template <typename A> struct ClipOp {
    A low, high;
    __device__ A operator()(A x) const {
        const A v = x < low ? low : x;
        return v > high ? high : v;
    }
};
template <typename A> struct ScaleOp {
    A s;
    int down;
    __device__ A operator()(A x) const { return down ? x / s : x * s; }
};

template <typename T, typename F>
__device__ void bcast_impl(const T* a, const T* b, T* c, int64_t n, int rank, const StridedPlan<2>& plan, F f) {
    GRID_STRIDE_LOOP(i, n) {
        int64_t off[2];
        strided_offsets<2>(plan, rank, i, off);
        c[i] = from_acc<T>(f(to_acc<T>(a[off[0]]), to_acc<T>(b[off[1]])));
    }
}

template <typename T>
__device__ void clip_bounds_impl(const T* x, T* y, int64_t n, const T* low, const T* high) {
    typedef acc_t<T> A;
    const A lo = low ? to_acc<T>(*low) : A(-INFINITY), hi = high ? to_acc<T>(*high) : A(INFINITY);
    map1<T>(x, y, n, ClipOp<A>{lo, hi});
}

#define UNARY(T, S, NAME, OP) \
    extern "C" __global__ void NAME##_##S(const T* x, T* y, int64_t n) { map1<T>(x, y, n, OP()); }
#define BINARY(T, S, NAME, OP)                                                                      \
    extern "C" __global__ void NAME##_##S(const T* a, const T* b, T* c, int64_t n) { map2<T>(a, b, c, n, OP()); } \
    extern "C" __global__ void NAME##_bcast_##S(const T* a, const T* b, T* c, int64_t n, int rank,  \
                                                StridedPlan<2> plan) {                              \
        bcast_impl<T>(a, b, c, n, rank, plan, OP());                                                \
    }
#define MATH_EXTRA(T, S)                                                                            \
    UNARY(T, S, abs, AbsOp) UNARY(T, S, sign, SignOp) UNARY(T, S, log, LogOp) UNARY(T, S, exp, ExpOp) \
    UNARY(T, S, sqrt, SqrtOp) UNARY(T, S, erf, ErfOp) UNARY(T, S, reciprocal, ReciprocalOp)         \
    BINARY(T, S, pow, PowOp) BINARY(T, S, max, MaxOp) BINARY(T, S, min, MinOp) BINARY(T, S, prelu, PReluOp) \
    extern "C" __global__ void clip_##S(const T* x, T* y, int64_t n, acc_t<T> low, acc_t<T> high) { \
        map1<T>(x, y, n, ClipOp<acc_t<T>>{low, high});                                              \
    }                                                                                               \
    extern "C" __global__ void clip_bounds_##S(const T* x, T* y, int64_t n, const T* low, const T* high) { \
        clip_bounds_impl<T>(x, y, n, low, high);                                                    \
    }                                                                                               \
    extern "C" __global__ void scale_##S(const T* x, T* y, int64_t n, acc_t<T> s, int down) {      \
        map1<T>(x, y, n, ScaleOp<acc_t<T>>{s, down});                                               \
    }
MT_FOR_FLOATS(MATH_EXTRA)
