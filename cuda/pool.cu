// Pooling kernels: MaxPool (with ONNX Indices), AveragePool, global pooling and their
// gradients, over contiguous (planes, spatial) buffers, planes = N * C.
//
// 1-D and 2-D pooling arrive as 3-D with leading unit axes (PoolGeom, filled by
// minitrain/providers/cuda/pool.py from ops/pool_geometry.py).  Indices are flattened over the
// whole N * C * spatial tensor, row-major or (storage_order = 1) column-major within a plane,
// as ext/pool.pyx writes them; pool_window.cuh's window_argmax says which element of a window
// is its maximum.
//
//   max_pool / avg_pool        one thread per output, looping over the window's valid taps.
//   max_pool_tiles_r1|r2|r3    max_pool where the windows tile the input (kernel = stride, no
//                              padding or dilation), for 1, 2 or 3 real spatial axes; 1-D
//                              windows of two over even planes read 16-byte packs of x.
//   avg_pool_grad              one thread per dX element, gathering from the windows over it:
//                              deterministic, no atomics; one product when every window
//                              counts the same.
//   max_pool_grad_tiles        kernel = stride, no padding or dilation (windows tile the input):
//                              one thread per window writes its whole box, dY where the index
//                              points and 0 elsewhere.  A window whose index lies outside its
//                              box (never the case for MaxPool's own indices) is patched by the
//                              grid's last block, which scatter-adds those windows (scratch[0]
//                              flags them, scratch[1] counts finished blocks).
//   max_pool_grad_scatter      the other geometries: atomic scatter-add into a zeroed dX.
// An index outside its (n, c) plane is skipped: nothing is written out of bounds.
#include "common.cuh"
#include "lanes.cuh"
#include "pool_window.cuh"

// Taps of window o along axis a that AveragePool counts: inside the padded input
// (count_include_pad) or inside the input.
__device__ __forceinline__ int counted_taps(const PoolGeom& g, int a, int o, int include_pad) {
    int start, t0, t1;
    valid_taps(g, a, o, start, t0, t1);
    if (!include_pad) return t1 - t0;
    const int room = g.size[a] + g.pad_end[a] - start;      // >= 1
    return min(g.kernel[a], g.dilation[a] == 1 ? room : (room - 1) / g.dilation[a] + 1);
}

// A position in a plane, from one storage order to the other.
__device__ __forceinline__ int col_to_row(int i, const PoolGeom& g) {
    const int D = g.size[0], H = g.size[1], W = g.size[2];
    return ((i % D) * H + (i / D) % H) * W + i / (D * H);
}
__device__ __forceinline__ int row_to_col(int k, const PoolGeom& g) {
    const int D = g.size[0], H = g.size[1], W = g.size[2];
    return k / (W * H) + ((k / W) % H) * D + (k % W) * D * H;
}

// The row-major position in plane p that index value v names, or -1 outside the plane.
__device__ __forceinline__ int index_target(int64_t v, int64_t p, int P, const PoolGeom& g, int col_major) {
    const int64_t local = v - p * (int64_t)P;
    if (local < 0 || local >= P) return -1;
    return col_major ? col_to_row((int)local, g) : (int)local;
}

__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(__half* p, __half v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(__nv_bfloat16* p, __nv_bfloat16 v) { atomicAdd(p, v); }

// ------------------------------------------------------------------------------- MaxPool
template <typename T>
__device__ void max_pool_impl(const T* x, T* y, int64_t* ind, int64_t total, PoolGeom g, int col_major) {
    const int P = plane_size(g), Q = out_size(g);
    GRID_STRIDE_LOOP(i, total) {
        int64_t p;
        int q, o[3];
        split_index(i, Q, p, q);
        coords(q, g.out, o);
        const T* xp = x + p * P;
        const int best_k = window_argmax(xp, g, o);
        y[i] = xp[best_k];
        if (ind != nullptr) ind[i] = p * P + (col_major ? row_to_col(best_k, g) : best_k);
    }
}

// 1-D windows of two over planes of even length: window i of the flat output is elements 2i and
// 2i + 1 of the flat input, so a thread takes 16-byte packs of x (V / 2 windows each), two packs
// at a time, and the tail of windows past the last whole pack one by one.  A pair's maximum is
// picked as tile_argmax picks it: the second where it is greater or a NaN.  In 1-D the
// column-major index is the row-major one.
template <typename T>
__device__ void max_pool_pairs(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ ind, int64_t total) {
    constexpr int V = vec_width<T>(), H = V / 2;
    const int64_t packs = total / H, stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t k0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k0 < packs; k0 += 2 * stride) {
        Lanes<T, V> in[2];
#pragma unroll
        for (int u = 0; u < 2; ++u)
            if (k0 + u * stride < packs) in[u] = load_lanes<T, V>(x, k0 + u * stride);
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int64_t k = k0 + u * stride;
            if (k >= packs) break;
            Lanes<T, H> out;
#pragma unroll
            for (int w = 0; w < H; ++w) {
                const acc_t<T> x0 = to_acc(in[u].v[2 * w]), x1 = to_acc(in[u].v[2 * w + 1]);
                const int second = x1 > x0 || x1 != x1;
                out.v[w] = second ? in[u].v[2 * w + 1] : in[u].v[2 * w];
                if (ind != nullptr) ind[k * H + w] = k * V + 2 * w + second;
            }
            store_lanes<T, H>(y, k, out);
        }
    }
    for (int64_t i = packs * H + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const acc_t<T> x0 = to_acc(x[2 * i]), x1 = to_acc(x[2 * i + 1]);
        const int second = x1 > x0 || x1 != x1;
        y[i] = x[2 * i + second];
        if (ind != nullptr) ind[i] = 2 * i + second;
    }
}

// The same for windows that tile the plane, with less index arithmetic (R: tile_start's); 1-D
// windows of two over planes of even length in packs (max_pool_pairs) where the pointers allow.
template <typename T, int R>
__device__ void max_pool_tiles_impl(const T* x, T* y, int64_t* ind, int64_t total, PoolGeom g, int col_major) {
    const int P = plane_size(g), Q = out_size(g);
    if (R == 1 && g.kernel[2] == 2 && P % 2 == 0 && aligned_to(x, 16) && aligned_to(y, 8)) {
        max_pool_pairs<T>(x, y, ind, total);
        return;
    }
    GRID_STRIDE_LOOP(i, total) {
        int64_t p;
        int q;
        split_index(i, Q, p, q);
        const T* xp = x + p * P;
        const int best_k = tile_argmax(xp, tile_start<R>(q, g), g);
        y[i] = xp[best_k];
        if (ind != nullptr) ind[i] = p * P + (col_major ? row_to_col(best_k, g) : best_k);
    }
}

#define MAX_POOL_TILES(T, S, R)                                                                          \
    extern "C" __global__ void max_pool_tiles_r##R##_##S(const T* x, T* y, int64_t* ind, int64_t total,   \
                                                         PoolGeom g, int col_major) {                    \
        max_pool_tiles_impl<T, R>(x, y, ind, total, g, col_major);                                       \
    }
#define MAX_POOL(T, S)                                                                                 \
    extern "C" __global__ void max_pool_##S(const T* x, T* y, int64_t* ind, int64_t total, PoolGeom g,   \
                                            int col_major) {                                           \
        max_pool_impl<T>(x, y, ind, total, g, col_major);                                              \
    }                                                                                                  \
    MAX_POOL_TILES(T, S, 1) MAX_POOL_TILES(T, S, 2) MAX_POOL_TILES(T, S, 3)
MT_FOR_FLOATS(MAX_POOL)

// ------------------------------------------------------------------------------- MaxPoolGrad
template <typename T> struct Pair;
template <> struct Pair<float> { typedef float2 type; };
template <> struct Pair<double> { typedef double2 type; };
template <> struct Pair<__half> { typedef __half2 type; };
template <> struct Pair<__nv_bfloat16> { typedef __nv_bfloat162 type; };

// Two adjacent elements in one store (p aligned to two elements).
template <typename T> __device__ __forceinline__ void store_pair(T* p, T a, T b) {
    typename Pair<T>::type v;
    v.x = a;
    v.y = b;
    *reinterpret_cast<typename Pair<T>::type*>(p) = v;
}

// Whether window q (at o) of plane p holds its index inside its own box; the target row-major
// position in the plane (-1 outside it) goes to `target`.
__device__ __forceinline__ bool index_in_tile(int64_t v, int64_t p, int P, const int* o, const PoolGeom& g,
                                              int col_major, int& target) {
    target = index_target(v, p, P, g, col_major);
    if (target < 0) return false;
    int c[3];
    coords(target, g.size, c);
    for (int a = 0; a < 3; ++a)
        if (c[a] / g.kernel[a] != o[a]) return false;
    return true;
}

template <typename T>
__device__ void max_pool_grad_tiles_impl(const T* dy, const int64_t* ind, T* dx, unsigned* scratch, int64_t total,
                                         PoolGeom g, int col_major) {
    const int P = plane_size(g), Q = out_size(g), H = g.size[1], W = g.size[2];
    const int k0 = g.kernel[0], k1 = g.kernel[1], k2 = g.kernel[2];
    const bool pairs = k2 == 2 && W % 2 == 0;
    const T zero = from_acc<T>(0);
    GRID_STRIDE_LOOP(i, total) {
        int64_t p;
        int q, o[3];
        split_index(i, Q, p, q);
        coords(q, g.out, o);
        const int target = index_target(ind[i], p, P, g, col_major);
        const T v = dy[i];
        T* out = dx + p * P;
        bool hit = false;
        for (int a = 0; a < k0; ++a)
            for (int b = 0; b < k1; ++b) {
                const int row = ((o[0] * k0 + a) * H + o[1] * k1 + b) * W + o[2] * k2;
                hit |= target >= row && target < row + k2;
                if (pairs) {
                    store_pair(out + row, row == target ? v : zero, row + 1 == target ? v : zero);
                } else {
                    for (int c = 0; c < k2; ++c) out[row + c] = row + c == target ? v : zero;
                }
            }
        if (!hit) *(volatile unsigned*)scratch = 1;
    }
    // the last block to finish adds the flagged windows' dY where their indices point
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(scratch + 1, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (*(volatile unsigned*)scratch) {
        for (int64_t i = threadIdx.x; i < total; i += blockDim.x) {
            int64_t p;
            int q, o[3], target;
            split_index(i, Q, p, q);
            coords(q, g.out, o);
            if (!index_in_tile(ind[i], p, P, o, g, col_major, target) && target >= 0)
                atomic_add(dx + p * P + target, dy[i]);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        scratch[0] = 0;
        scratch[1] = 0;
    }
}

template <typename T>
__device__ void max_pool_grad_scatter_impl(const T* dy, const int64_t* ind, T* dx, int64_t total, PoolGeom g,
                                           int col_major) {
    const int P = plane_size(g), Q = out_size(g);
    GRID_STRIDE_LOOP(i, total) {
        int64_t p;
        int q;
        split_index(i, Q, p, q);
        const int target = index_target(ind[i], p, P, g, col_major);
        if (target >= 0) atomic_add(dx + p * P + target, dy[i]);
    }
}

#define MAX_POOL_GRAD(T, S)                                                                                \
    extern "C" __global__ void max_pool_grad_tiles_##S(const T* dy, const int64_t* ind, T* dx,               \
                                                       unsigned* scratch, int64_t total, PoolGeom g,         \
                                                       int col_major) {                                      \
        max_pool_grad_tiles_impl<T>(dy, ind, dx, scratch, total, g, col_major);                              \
    }                                                                                                        \
    extern "C" __global__ void max_pool_grad_scatter_##S(const T* dy, const int64_t* ind, T* dx,             \
                                                         int64_t total, PoolGeom g, int col_major) {         \
        max_pool_grad_scatter_impl<T>(dy, ind, dx, total, g, col_major);                                     \
    }
MT_FOR_FLOATS(MAX_POOL_GRAD)

// ------------------------------------------------------------------------------- AveragePool
// `uniform` > 0: every window counts the same and its weight is `uniform`; else each window
// weighs 1 / its counted taps.
template <typename T>
__device__ void avg_pool_impl(const T* x, T* y, int64_t total, acc_t<T> uniform, PoolGeom g, int include_pad) {
    typedef acc_t<T> A;
    const int P = plane_size(g), Q = out_size(g), H = g.size[1], W = g.size[2];
    GRID_STRIDE_LOOP(i, total) {
        int64_t p;
        int q, o[3], s[3], t0[3], t1[3];
        split_index(i, Q, p, q);
        coords(q, g.out, o);
        for (int a = 0; a < 3; ++a) valid_taps(g, a, o[a], s[a], t0[a], t1[a]);
        const T* xp = x + p * P;
        A sum = 0;
        for (int a = t0[0]; a < t1[0]; ++a) {
            const int pd = s[0] + a * g.dilation[0];
            for (int b = t0[1]; b < t1[1]; ++b) {
                const int row = (pd * H + s[1] + b * g.dilation[1]) * W + s[2];
                for (int c = t0[2]; c < t1[2]; ++c) sum += to_acc(xp[row + c * g.dilation[2]]);
            }
        }
        A weight = uniform;
        if (weight <= A(0)) {
            const int count = counted_taps(g, 0, o[0], include_pad) * counted_taps(g, 1, o[1], include_pad) *
                              counted_taps(g, 2, o[2], include_pad);
            weight = A(1) / A(count);
        }
        y[i] = from_acc<T>(sum * weight);
    }
}

// The windows [lo, hi] along axis a whose span holds coordinate v (a superset with dilation:
// the taps are checked by the caller).
__device__ __forceinline__ void windows_over(const PoolGeom& g, int a, int v, int& lo, int& hi) {
    const int extent = (g.kernel[a] - 1) * g.dilation[a] + 1, u = v + g.pad[a], s = g.stride[a];
    lo = u < extent ? 0 : (s == 1 ? u - extent + 1 : (u - extent) / s + 1);
    hi = min(s == 1 ? u : u / s, g.out[a] - 1);
}

// Whether coordinate v of axis a is a tap of window o (a window of windows_over's range).
__device__ __forceinline__ bool on_tap(const PoolGeom& g, int a, int v, int o) {
    return g.dilation[a] == 1 || (v + g.pad[a] - o * g.stride[a]) % g.dilation[a] == 0;
}

// WEIGHTED: each window weighs 1 / its counted taps; else all weigh `uniform`, applied once.
template <typename T, bool WEIGHTED>
__device__ void avg_pool_grad_loop(const T* dy, T* dx, int64_t total, acc_t<T> uniform, const PoolGeom& g,
                                   int include_pad) {
    typedef acc_t<T> A;
    const int P = plane_size(g), Q = out_size(g), OH = g.out[1], OW = g.out[2];
    GRID_STRIDE_LOOP(i, total) {
        int64_t p;
        int e, c[3], lo[3], hi[3];
        split_index(i, P, p, e);
        coords(e, g.size, c);
        for (int a = 0; a < 3; ++a) windows_over(g, a, c[a], lo[a], hi[a]);
        const T* dyp = dy + p * Q;
        A sum = 0;
        for (int od = lo[0]; od <= hi[0]; ++od) {
            if (!on_tap(g, 0, c[0], od)) continue;
            const A wd = WEIGHTED ? A(1) / A(counted_taps(g, 0, od, include_pad)) : A(1);
            for (int oh = lo[1]; oh <= hi[1]; ++oh) {
                if (!on_tap(g, 1, c[1], oh)) continue;
                const T* row = dyp + (od * OH + oh) * OW;
                A part = 0;
                for (int ow = lo[2]; ow <= hi[2]; ++ow) {
                    if (!on_tap(g, 2, c[2], ow)) continue;
                    const A v = to_acc(row[ow]);
                    part += WEIGHTED ? v / A(counted_taps(g, 2, ow, include_pad)) : v;
                }
                sum += WEIGHTED ? part * (wd / A(counted_taps(g, 1, oh, include_pad))) : part;
            }
        }
        dx[i] = from_acc<T>(WEIGHTED ? sum : sum * uniform);
    }
}

template <typename T>
__device__ void avg_pool_grad_impl(const T* dy, T* dx, int64_t total, acc_t<T> uniform, PoolGeom g,
                                   int include_pad) {
    if (uniform > acc_t<T>(0))
        avg_pool_grad_loop<T, false>(dy, dx, total, uniform, g, include_pad);
    else
        avg_pool_grad_loop<T, true>(dy, dx, total, uniform, g, include_pad);
}

#define AVG_POOL(T, S)                                                                                         \
    extern "C" __global__ void avg_pool_##S(const T* x, T* y, int64_t total, acc_t<T> uniform, PoolGeom g,       \
                                            int include_pad) {                                                 \
        avg_pool_impl<T>(x, y, total, uniform, g, include_pad);                                                \
    }                                                                                                          \
    extern "C" __global__ void avg_pool_grad_##S(const T* dy, T* dx, int64_t total, acc_t<T> uniform,           \
                                                 PoolGeom g, int include_pad) {                                \
        avg_pool_grad_impl<T>(dy, dx, total, uniform, g, include_pad);                                         \
    }
MT_FOR_FLOATS(AVG_POOL)

// ------------------------------------------------------------------------------- global pooling
// Every lane of the warp gets the combination of the warp's v.
template <typename A, typename F> __device__ __forceinline__ A warp_reduce(A v, F combine) {
    for (int k = 16; k > 0; k >>= 1) v = combine(v, __shfl_xor_sync(0xffffffffu, v, k));
    return v;
}

// One block per plane (grid-stride over planes); blockDim is a multiple of 32, at most 1024.
template <typename A, typename F> __device__ A block_reduce(A v, F combine) {
    __shared__ A partial[32];
    v = warp_reduce(v, combine);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    __syncthreads();    // partial[] may still be read by the previous call
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = partial[0];
    for (int w = 1; w < warps; ++w) v = combine(v, partial[w]);
    return v;
}

template <typename A> __device__ __forceinline__ A max_or_nan(A a, A b) { return (b != b || b > a) ? b : a; }

template <typename T>
__device__ void global_pool_impl(const T* x, T* y, int64_t planes, int64_t P, int is_max) {
    typedef acc_t<T> A;
    for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
        const T* xp = x + p * P;
        A v = is_max ? -INFINITY : A(0);
        for (int64_t i = threadIdx.x; i < P; i += blockDim.x)
            v = is_max ? max_or_nan(v, to_acc(xp[i])) : v + to_acc(xp[i]);
        if (is_max)
            v = block_reduce(v, [](A a, A b) { return max_or_nan(a, b); });
        else
            v = block_reduce(v, [](A a, A b) { return a + b; });
        if (threadIdx.x == 0) y[p] = from_acc<T>(is_max ? v : v / A(P));
    }
}

// The same with a warp per plane, for short planes (several planes to a block); each lane adds
// its elements lane, lane + 32, ... in that order, LANE_LOADS of them loaded at a time.
constexpr int LANE_LOADS = 8;

template <typename T>
__device__ void global_pool_warps_impl(const T* x, T* y, int64_t planes, int64_t P, int is_max) {
    typedef acc_t<T> A;
    const int lane = threadIdx.x % 32, per_block = blockDim.x / 32;
    const int64_t step = (int64_t)gridDim.x * per_block;
    for (int64_t p = (int64_t)blockIdx.x * per_block + threadIdx.x / 32; p < planes; p += step) {
        const T* xp = x + p * P;
        A v = is_max ? -INFINITY : A(0);
        int64_t i = lane;
        for (; i + 32 * (LANE_LOADS - 1) < P; i += 32 * LANE_LOADS) {    // LANE_LOADS loads in flight
            T r[LANE_LOADS];
#pragma unroll
            for (int k = 0; k < LANE_LOADS; ++k) r[k] = xp[i + 32 * k];
#pragma unroll
            for (int k = 0; k < LANE_LOADS; ++k) v = is_max ? max_or_nan(v, to_acc(r[k])) : v + to_acc(r[k]);
        }
        for (; i < P; i += 32) v = is_max ? max_or_nan(v, to_acc(xp[i])) : v + to_acc(xp[i]);
        if (is_max)
            v = warp_reduce(v, [](A a, A b) { return max_or_nan(a, b); });
        else
            v = warp_reduce(v, [](A a, A b) { return a + b; });
        if (lane == 0) y[p] = from_acc<T>(is_max ? v : v / A(P));
    }
}

template <typename T> __device__ void global_avg_pool_grad_impl(const T* dy, T* dx, int64_t P, int64_t total) {
    typedef acc_t<T> A;
    const A inv = A(1) / A(P);
    GRID_STRIDE_LOOP(i, total) {
        const int64_t p = i <= INT32_MAX && P <= INT32_MAX ? (int64_t)((unsigned)i / (unsigned)P) : i / P;
        dx[i] = from_acc<T>(to_acc(dy[p]) * inv);
    }
}

// (value, position) of GlobalMaxPool's pick: a NaN over a number and the later NaN over an
// earlier one, else the greater value and, between equals, the earlier position.
template <typename A> struct Pick {
    A v;
    int64_t k;
};
template <typename A> __device__ __forceinline__ Pick<A> better(Pick<A> a, Pick<A> b) {
    const bool an = a.v != a.v, bn = b.v != b.v;
    if (an || bn) return (an && bn) ? (a.k > b.k ? a : b) : (an ? a : b);
    return (b.v > a.v || (b.v == a.v && b.k < a.k)) ? b : a;
}

template <typename T>
__device__ void global_max_pool_grad_impl(const T* dy, const T* x, T* dx, int64_t planes, int64_t P) {
    typedef acc_t<T> A;
    __shared__ int64_t best;
    for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
        const T* xp = x + p * P;
        Pick<A> mine = {-INFINITY, INT64_MAX};
        for (int64_t i = threadIdx.x; i < P; i += blockDim.x) mine = better(mine, Pick<A>{to_acc(xp[i]), i});
        A v = mine.v;
        int64_t k = mine.k;
        for (int s = 16; s > 0; s >>= 1) {
            const Pick<A> other = {__shfl_xor_sync(0xffffffffu, v, s), __shfl_xor_sync(0xffffffffu, k, s)};
            const Pick<A> b = better(Pick<A>{v, k}, other);
            v = b.v;
            k = b.k;
        }
        __shared__ A vs[32];
        __shared__ int64_t ks[32];
        __syncthreads();
        if (threadIdx.x % 32 == 0) {
            vs[threadIdx.x / 32] = v;
            ks[threadIdx.x / 32] = k;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            Pick<A> b = {vs[0], ks[0]};
            for (int w = 1; w < (int)blockDim.x / 32; ++w) b = better(b, Pick<A>{vs[w], ks[w]});
            best = b.k;
        }
        __syncthreads();
        const T g = dy[p], zero = from_acc<T>(0);
        for (int64_t i = threadIdx.x; i < P; i += blockDim.x) dx[p * P + i] = i == best ? g : zero;
    }
}

#define GLOBAL_POOL(T, S)                                                                                       \
    extern "C" __global__ void global_pool_##S(const T* x, T* y, int64_t planes, int64_t P, int is_max) {         \
        global_pool_impl<T>(x, y, planes, P, is_max);                                                           \
    }                                                                                                           \
    extern "C" __global__ void global_pool_warps_##S(const T* x, T* y, int64_t planes, int64_t P, int is_max) {   \
        global_pool_warps_impl<T>(x, y, planes, P, is_max);                                                     \
    }                                                                                                           \
    extern "C" __global__ void global_avg_pool_grad_##S(const T* dy, T* dx, int64_t P, int64_t total) {           \
        global_avg_pool_grad_impl<T>(dy, dx, P, total);                                                         \
    }                                                                                                           \
    extern "C" __global__ void global_max_pool_grad_##S(const T* dy, const T* x, T* dx, int64_t planes,           \
                                                        int64_t P) {                                            \
        global_max_pool_grad_impl<T>(dy, x, dx, planes, P);                                                     \
    }
MT_FOR_FLOATS(GLOBAL_POOL)
