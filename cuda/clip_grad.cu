// ClipGrad (minitrain/ops/fused.py), Clip's gradient in one pass over flat contiguous buffers:
// dx = 0 where x < low or x > high, else dy.  A NaN x fails both comparisons and passes dy, as
// the Less, Greater and Where kernels it replaces do (cuda/logic.cu).  The bounds are read on the
// device from pointers, either null when absent (it then clips nothing), so a captured step holds
// no host value.
//   clip_grad_<T>(dy, x, dx, n, low, high)
#include "common.cuh"
#include "elementwise_map.cuh"

template <typename A> struct ClipGradOp {
    A low, high;
    __device__ A operator()(A dy, A x) const { return x < low || x > high ? A(0) : dy; }
};

template <typename T>
__device__ void clip_grad_impl(const T* dy, const T* x, T* dx, int64_t n, const T* low, const T* high) {
    typedef acc_t<T> A;
    const A lo = low ? to_acc<T>(*low) : A(-INFINITY), hi = high ? to_acc<T>(*high) : A(INFINITY);
    map2<T>(dy, x, dx, n, ClipGradOp<A>{lo, hi});
}

#define CLIP_GRAD(T, S)                                                                                 \
    extern "C" __global__ void clip_grad_##S(const T* dy, const T* x, T* dx, int64_t n, const T* low,  \
                                             const T* high) {                                           \
        clip_grad_impl<T>(dy, x, dx, n, low, high);                                                     \
    }
MT_FOR_FLOATS(CLIP_GRAD)
