// The window geometry of pooling, shared by cuda/pool.cu and the fused MaxPool gradient of
// cuda/fused.cu: one PoolGeom per launch (1-D and 2-D pooling padded to 3-D with leading unit
// axes), and the argmax of a window, so that every kernel picks the same element.
#pragma once
#include "common.cuh"

struct PoolGeom {
    int size[3], out[3], kernel[3], stride[3], dilation[3], pad[3], pad_end[3];
};

__device__ __forceinline__ int plane_size(const PoolGeom& g) { return g.size[0] * g.size[1] * g.size[2]; }
__device__ __forceinline__ int out_size(const PoolGeom& g) { return g.out[0] * g.out[1] * g.out[2]; }

// (c0, c1, c2) coordinates of position q of a (n0, n1, n2) box, row-major.
__device__ __forceinline__ void coords(int q, const int* n, int* c) {
    c[2] = q % n[2];
    q /= n[2];
    c[1] = q % n[1];
    c[0] = q / n[1];
}

// The taps [t0, t1) of window o along axis a that land inside the input; start is its first
// tap.  Windows always start inside the padded input, before its end.
__device__ __forceinline__ void valid_taps(const PoolGeom& g, int a, int o, int& start, int& t0, int& t1) {
    const int d = g.dilation[a];
    start = o * g.stride[a] - g.pad[a];
    if (d == 1) {
        t0 = max(0, -start);
        t1 = max(t0, min(g.kernel[a], g.size[a] - start));
        return;
    }
    t0 = start < 0 ? (-start + d - 1) / d : 0;
    const int last = g.size[a] - 1 - start;
    t1 = last >= 0 ? min(g.kernel[a], last / d + 1) : 0;
    t1 = max(t0, t1);
}

// The row-major plane position of window o's maximum in plane xp: the first maximum wins, a
// NaN wins over any number and a later NaN over an earlier one (ext/pool.pyx's rule).
template <typename T> __device__ __forceinline__ int window_argmax(const T* xp, const PoolGeom& g, const int* o) {
    const int H = g.size[1], W = g.size[2];
    int s[3], t0[3], t1[3];
    for (int a = 0; a < 3; ++a) valid_taps(g, a, o[a], s[a], t0[a], t1[a]);
    int best_k = -1;
    acc_t<T> best = 0;
    for (int a = t0[0]; a < t1[0]; ++a) {
        const int pd = s[0] + a * g.dilation[0];
        for (int b = t0[1]; b < t1[1]; ++b) {
            const int row = (pd * H + s[1] + b * g.dilation[1]) * W + s[2];
            for (int c = t0[2]; c < t1[2]; ++c) {
                const int k = row + c * g.dilation[2];
                const acc_t<T> v = to_acc(xp[k]);
                if (best_k < 0 || v > best || v != v) {
                    best = v;
                    best_k = k;
                }
            }
        }
    }
    return best_k;
}

// The row-major plane position of window q's first element, for windows that tile the plane
// (kernel = stride, no padding or dilation); R: how many of the three axes are real (the last
// R), so that 1-D and 2-D pooling skip the divisions of the unit axes.
template <int R> __device__ __forceinline__ int tile_start(int q, const PoolGeom& g) {
    if (R == 1) return q * g.kernel[2];
    if (R == 2) {
        const int o1 = q / g.out[2];
        return o1 * g.kernel[1] * g.size[2] + (q - o1 * g.out[2]) * g.kernel[2];
    }
    int o[3];
    coords(q, g.out, o);
    return (o[0] * g.kernel[0] * g.size[1] + o[1] * g.kernel[1]) * g.size[2] + o[2] * g.kernel[2];
}

// window_argmax for a window that tiles the plane, starting at `first`: the same rule, the
// box's taps all inside the plane.
template <typename T> __device__ __forceinline__ int tile_argmax(const T* xp, int first, const PoolGeom& g) {
    const int H = g.size[1], W = g.size[2];
    int best_k = first;
    acc_t<T> best = to_acc(xp[first]);
    for (int a = 0; a < g.kernel[0]; ++a)
        for (int b = 0; b < g.kernel[1]; ++b)
            for (int c = 0; c < g.kernel[2]; ++c) {
                const int k = first + (a * H + b) * W + c;
                const acc_t<T> v = to_acc(xp[k]);
                if (v > best || v != v) {
                    best = v;
                    best_k = k;
                }
            }
    return best_k;
}
