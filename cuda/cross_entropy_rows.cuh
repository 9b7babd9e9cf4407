// Row helpers of the softmax cross-entropy kernels (cuda/loss.cu, cuda/fused.cu): a row's
// label (checked) and class weight, and max/sum over the lanes that share a row.
#pragma once
#include "common.cuh"

// The class of row r's label, or -1 when the row does not count: ignored, or out of range
// (then recorded in bad, when `report`).
template <typename L>
__device__ __forceinline__ int64_t row_label(const L* labels, int64_t r, int64_t C, int64_t ignore_index,
                                             int has_ignore, unsigned long long* bad, bool report) {
    const int64_t label = (int64_t)labels[r];
    if (has_ignore && label == ignore_index) return -1;
    if (label < 0 || label >= C) {
        if (report && atomicCAS(bad, 0ull, 1ull) == 0ull) bad[1] = (unsigned long long)label;
        return -1;
    }
    return label;
}

template <typename T>
__device__ __forceinline__ acc_t<T> class_weight(const T* weights, int64_t label) {
    return label < 0 ? acc_t<T>(0) : weights ? to_acc<T>(weights[label]) : acc_t<T>(1);
}

// Max and sum over the G lanes that share a row (G = 1: the lane alone; G = 32: a warp).
template <int G, typename A> __device__ __forceinline__ A group_max(A v) {
#pragma unroll
    for (int s = G / 2; s > 0; s >>= 1) {
        const A o = __shfl_xor_sync(0xffffffffu, v, s);
        v = o > v ? o : v;
    }
    return v;
}

template <int G, typename A> __device__ __forceinline__ A group_sum(A v) {
#pragma unroll
    for (int s = G / 2; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s);
    return v;
}

// log(sum(exp(xr[c * D]))) over the row's C scores (D apart), read by its G lanes: the maximum
// first, so no exp overflows; every lane gets the result.
template <typename T, int G>
__device__ __forceinline__ acc_t<T> row_logsumexp(const T* xr, int64_t C, int64_t D, int lane) {
    typedef acc_t<T> A;
    A mx = -INFINITY;
    for (int64_t c = lane; c < C; c += G) {
        const A v = to_acc<T>(xr[c * D]);
        mx = v > mx ? v : mx;
    }
    mx = group_max<G>(mx);
    A s = 0;
    for (int64_t c = lane; c < C; c += G) s += exp(to_acc<T>(xr[c * D]) - mx);
    return mx + log(group_sum<G>(s));
}
