// Structural ops: a fill, Pad's index maps and their fold (PadGrad), Gather/GatherGrad, and
// Resize / ResizeGrad one axis at a time; their strided copies (Concat, Split, Slice, SliceGrad,
// Expand, Tile, Pad's interior) are layout.cu's.
//
// The host plans layouts (minitrain/providers/cuda/structural.py): strides, offsets and
// per-axis sizes travel as kernel parameters, so no kernel reads a table from device memory
// and none waits for the host.  Sums (GatherGrad, PadGrad, ResizeGrad) gather: each output
// element adds its contributions in a fixed order, in the accumulation type, without atomics.
#include "common.cuh"

// ----------------------------------------------------------------------------- fill
template <typename T>
__device__ void fill_impl(T* dst, int64_t n, acc_t<T> value) {
    const T v = from_acc<T>(value);
    GRID_STRIDE_LOOP(i, n) dst[i] = v;
}

// ----------------------------------------------------------------------------- pad
// Pad modes, as minitrain/providers/cuda/structural.py numbers them.
#define MT_PAD_CONSTANT 0
#define MT_PAD_REFLECT 1
#define MT_PAD_EDGE 2
#define MT_PAD_WRAP 3

// The input position that output position o copies along an axis of `size` entries padded by
// `begin` in front; -1 for the constant.
__device__ __forceinline__ int64_t pad_source(int mode, int64_t o, int64_t size, int64_t begin) {
    int64_t p = o - begin;
    if (mode == MT_PAD_CONSTANT) return (p >= 0 && p < size) ? p : -1;
    if (mode == MT_PAD_EDGE) return p < 0 ? 0 : (p >= size ? size - 1 : p);
    if (mode == MT_PAD_WRAP) {
        p %= size;
        return p < 0 ? p + size : p;
    }
    if (size == 1) return 0;
    const int64_t period = 2 * (size - 1);
    int64_t q = p % period;
    if (q < 0) q += period;
    return q < size ? q : period - q;
}

struct PadPlan {
    int64_t out_size[MT_MAX_RANK];
    int64_t in_size[MT_MAX_RANK];
    int64_t begin[MT_MAX_RANK];
    int64_t in_stride[MT_MAX_RANK];
};

// y[i] = x[the mapped position of each coordinate] (reflect, edge, wrap): every coordinate maps.
template <typename T>
__device__ void pad_map_impl(const T* x, T* y, int64_t n, int rank, const PadPlan& p, int mode) {
    GRID_STRIDE_LOOP(i, n) {
        int64_t rest = i, off = 0;
#pragma unroll
        for (int d = MT_MAX_RANK - 1; d >= 0; --d) {
            if (d < rank) {
                const int64_t q = rest / p.out_size[d];
                const int64_t o = rest - q * p.out_size[d];
                rest = q;
                off += pad_source(mode, o, p.in_size[d], p.begin[d]) * p.in_stride[d];
            }
        }
        y[i] = x[off];
    }
}

// One padded axis folded back: dx (outer, size, inner) sums dy (outer, length, inner) over
// the positions o of the axis that copy position k (the main one, o = k + begin, first).
template <typename T>
__device__ void pad_fold_impl(const T* dy, T* dx, int64_t n, int64_t inner, int64_t length, int64_t size,
                              int64_t begin, int mode) {
    const int64_t end_pad = length - begin - size;
    GRID_STRIDE_LOOP(i, n) {
        const int64_t r = i % inner, k = (i / inner) % size, outer = i / (inner * size);
        const T* row = dy + outer * length * inner + r;
        acc_t<T> sum = 0;
        if (k + begin >= 0 && k + begin < length) sum = to_acc<T>(row[(k + begin) * inner]);
        if (mode != MT_PAD_CONSTANT) {
            for (int64_t o = 0; o < begin; ++o)
                if (pad_source(mode, o, size, begin) == k) sum += to_acc<T>(row[o * inner]);
            for (int64_t o = length - (end_pad > 0 ? end_pad : 0); o < length; ++o)
                if (pad_source(mode, o, size, begin) == k) sum += to_acc<T>(row[o * inner]);
        }
        dx[i] = from_acc<T>(sum);
    }
}

// ----------------------------------------------------------------------------- gather
// y (outer, count, inner) = x (outer, dim, inner) at the (non-negative) indices.
template <typename T>
__device__ void gather_impl(const T* x, const int64_t* index, T* y, int64_t n, int64_t inner, int64_t count,
                            int64_t dim) {
    GRID_STRIDE_LOOP(i, n) {
        const int64_t r = i % inner, j = (i / inner) % count, outer = i / (inner * count);
        y[i] = x[(outer * dim + index[j]) * inner + r];
    }
}

// dx (outer, dim, inner) = the sum of dy (outer, count, inner) over the j whose index is k.
template <typename T>
__device__ void gather_grad_impl(const T* dy, const int64_t* index, T* dx, int64_t n, int64_t inner, int64_t count,
                                 int64_t dim) {
    GRID_STRIDE_LOOP(i, n) {
        const int64_t r = i % inner, k = (i / inner) % dim, outer = i / (inner * dim);
        acc_t<T> sum = 0;
        for (int64_t j = 0; j < count; ++j)
            if (index[j] == k) sum += to_acc<T>(dy[(outer * count + j) * inner + r]);
        dx[i] = from_acc<T>(sum);
    }
}

// ----------------------------------------------------------------------------- resize
// Coordinate modes and nearest roundings, as minitrain/providers/cuda/structural.py numbers
// them; the arithmetic is minitrain/ops/resize.py's, in double, so both providers pick the
// same positions.
#define MT_RESIZE_HALF_PIXEL 0
#define MT_RESIZE_PYTORCH_HALF_PIXEL 1
#define MT_RESIZE_ALIGN_CORNERS 2
#define MT_RESIZE_ASYMMETRIC 3
#define MT_RESIZE_HALF_PIXEL_SYMMETRIC 4
#define MT_ROUND_PREFER_FLOOR 0
#define MT_ROUND_PREFER_CEIL 1
#define MT_FLOOR 2
#define MT_CEIL 3

struct ResizeAxis {
    int64_t size, out;
    double scale;
    int64_t coordinates, nearest, linear;
};

__device__ __forceinline__ double resize_source(const ResizeAxis& a, int64_t o) {
    switch (a.coordinates) {
        case MT_RESIZE_ASYMMETRIC: return o / a.scale;
        case MT_RESIZE_ALIGN_CORNERS: return a.out == 1 ? 0.0 : (double)o * (a.size - 1) / (a.out - 1);
        case MT_RESIZE_PYTORCH_HALF_PIXEL: if (a.out == 1) return 0.0; break;
        default: break;
    }
    double x = (o + 0.5) / a.scale - 0.5;
    if (a.coordinates == MT_RESIZE_HALF_PIXEL_SYMMETRIC) x += a.size / 2.0 * (1.0 - a.out / (a.scale * a.size));
    return x;
}

__device__ __forceinline__ int64_t resize_nearest(const ResizeAxis& a, double x) {
    double r;
    switch (a.nearest) {
        case MT_ROUND_PREFER_FLOOR: r = ceil(x - 0.5); break;
        case MT_ROUND_PREFER_CEIL: r = floor(x + 0.5); break;
        case MT_FLOOR: r = floor(x); break;
        default: r = ceil(x); break;
    }
    return r < 0 ? 0 : (r > a.size - 1 ? a.size - 1 : (int64_t)r);
}

// Linear taps of output position o: left and right positions and the right one's weight.
__device__ __forceinline__ void resize_taps(const ResizeAxis& a, int64_t o, int64_t& left, int64_t& right, double& w) {
    double x = resize_source(a, o);
    x = x < 0 ? 0 : (x > a.size - 1 ? (double)(a.size - 1) : x);
    left = (int64_t)floor(x);
    right = left + 1 < a.size ? left + 1 : a.size - 1;
    w = x - left;
}

// y (outer, out, inner) = x (outer, size, inner) resized along the middle axis.
template <typename T>
__device__ void resize_axis_impl(const T* x, T* y, int64_t n, int64_t inner, const ResizeAxis& a) {
    GRID_STRIDE_LOOP(i, n) {
        const int64_t r = i % inner, o = (i / inner) % a.out, outer = i / (inner * a.out);
        const T* row = x + outer * a.size * inner + r;
        if (a.linear) {
            int64_t left, right;
            double w;
            resize_taps(a, o, left, right, w);
            const acc_t<T> wr = (acc_t<T>)w;
            y[i] = from_acc<T>(to_acc<T>(row[left * inner]) * (acc_t<T>(1) - wr) + to_acc<T>(row[right * inner]) * wr);
        } else {
            y[i] = row[resize_nearest(a, resize_source(a, o)) * inner];
        }
    }
}

// The first output position whose (nearest, or right linear) position is at least k: positions
// never decrease along the axis, so a binary search finds where k's contributions begin.
__device__ __forceinline__ int64_t resize_first_reaching(const ResizeAxis& a, int64_t k) {
    int64_t lo = 0, hi = a.out;
    while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        int64_t reach;
        if (a.linear) {
            int64_t left;
            double w;
            resize_taps(a, mid, left, reach, w);
        } else {
            reach = resize_nearest(a, resize_source(a, mid));
        }
        if (reach < k) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// dx (outer, size, inner) = dy (outer, out, inner) added back along the middle axis.
template <typename T>
__device__ void resize_axis_grad_impl(const T* dy, T* dx, int64_t n, int64_t inner, const ResizeAxis& a) {
    GRID_STRIDE_LOOP(i, n) {
        const int64_t r = i % inner, k = (i / inner) % a.size, outer = i / (inner * a.size);
        const T* row = dy + outer * a.out * inner + r;
        acc_t<T> sum = 0;
        for (int64_t o = resize_first_reaching(a, k); o < a.out; ++o) {
            if (a.linear) {
                int64_t left, right;
                double w;
                resize_taps(a, o, left, right, w);
                if (left > k) break;
                const acc_t<T> g = to_acc<T>(row[o * inner]), wr = (acc_t<T>)w;
                if (left == k) sum += g * (acc_t<T>(1) - wr);
                if (right == k) sum += g * wr;
            } else {
                if (resize_nearest(a, resize_source(a, o)) != k) break;
                sum += to_acc<T>(row[o * inner]);
            }
        }
        dx[i] = from_acc<T>(sum);
    }
}

#define STRUCTURAL(T, S)                                                                              \
    extern "C" __global__ void fill_##S(T* dst, int64_t n, acc_t<T> value) { fill_impl<T>(dst, n, value); } \
    extern "C" __global__ void pad_map_##S(const T* x, T* y, int64_t n, int rank, PadPlan plan, int mode) { \
        pad_map_impl<T>(x, y, n, rank, plan, mode);                                                   \
    }                                                                                                 \
    extern "C" __global__ void pad_fold_##S(const T* dy, T* dx, int64_t n, int64_t inner, int64_t length, \
                                            int64_t size, int64_t begin, int mode) {                  \
        pad_fold_impl<T>(dy, dx, n, inner, length, size, begin, mode);                                \
    }                                                                                                 \
    extern "C" __global__ void gather_##S(const T* x, const int64_t* index, T* y, int64_t n, int64_t inner, \
                                          int64_t count, int64_t dim) {                               \
        gather_impl<T>(x, index, y, n, inner, count, dim);                                            \
    }                                                                                                 \
    extern "C" __global__ void gather_grad_##S(const T* dy, const int64_t* index, T* dx, int64_t n,    \
                                               int64_t inner, int64_t count, int64_t dim) {           \
        gather_grad_impl<T>(dy, index, dx, n, inner, count, dim);                                     \
    }                                                                                                 \
    extern "C" __global__ void resize_axis_##S(const T* x, T* y, int64_t n, int64_t inner, ResizeAxis a) { \
        resize_axis_impl<T>(x, y, n, inner, a);                                                       \
    }                                                                                                 \
    extern "C" __global__ void resize_axis_grad_##S(const T* dy, T* dx, int64_t n, int64_t inner,     \
                                                    ResizeAxis a) {                                   \
        resize_axis_grad_impl<T>(dy, dx, n, inner, a);                                                \
    }
MT_FOR_FLOATS(STRUCTURAL)
