// Staging of the implicit-GEMM 1-D convolutions' tiles in shared memory (conv_gemm1d.cu and
// conv_gemm1d_tf32.cu): the line geometry, cp.async copies, and the block-wide stage loops.
#pragma once
#include "common.cuh"
#include <type_traits>

#define STAGE_BATCH 8

// A "line" convolution: source (N, in_channels, in_len) -> destination (N, out_channels, out_len).
struct LineGeo {
    int in_channels, out_channels, in_len, out_len, k, pad;
};

// dst = *src in shared memory without a register on the way (cp.async, sm_80 and newer); zero
// when src is null (no byte is read: `fallback`, any valid address, stands in for it).
template <typename T>
__device__ __forceinline__ void copy_async(T* dst, const T* src, const T* fallback) {
    const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(to), "l"(src ? src : fallback),
                 "n"((int)sizeof(T)), "r"(src ? (int)sizeof(T) : 0));
}

__device__ __forceinline__ void copies_done() { asm volatile("cp.async.wait_all;\n" ::); }

// The copies issued since the last commit form one group; copies_wait(pending) returns when at
// most `pending` (0, 1 or 2; more counts as 2) of this thread's groups are still in flight.
__device__ __forceinline__ void copies_commit() { asm volatile("cp.async.commit_group;\n" ::); }

__device__ __forceinline__ void copies_wait(int pending) {
    if (pending <= 0)
        asm volatile("cp.async.wait_group 0;\n" ::);
    else if (pending == 1)
        asm volatile("cp.async.wait_group 1;\n" ::);
    else
        asm volatile("cp.async.wait_group 2;\n" ::);
}

// 16 bytes from src to dst in shared memory, those past the first `valid` (0 to 16) zero; src
// is a valid 16-byte-aligned address even where no byte of it is read.
__device__ __forceinline__ void copy_async16(float* dst, const float* src, int valid) {
    const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src), "r"(valid));
}

// For r < rows, j < width: dst[index(r, j)] = *source(r, j) (zero where source gives null),
// the pairs dealt to the block's threads in row-major order.  Float and double go by cp.async,
// every copy of a thread in flight at once (copies_done() waits for them); the 16-bit types,
// which convert on the way, through registers, STAGE_BATCH loads in flight before their stores.
template <typename T, typename Source, typename Index>
__device__ __forceinline__ void stage(acc_t<T>* dst, int rows, int width, int tid, int threads, const T* fallback,
                                      Source source, Index index) {
    typedef acc_t<T> A;
    const int total = rows * width, dr = threads / width, dj = threads - dr * width;
    int r = tid / width, j = tid - r * width;
    if constexpr (std::is_same<T, A>::value) {
        for (int e = tid; e < total; e += threads) {
            copy_async(dst + index(r, j), source(r, j), fallback);
            r += dr;
            j += dj;
            if (j >= width) {
                j -= width;
                ++r;
            }
        }
    } else {
        for (int e = tid; e < total; e += STAGE_BATCH * threads) {
            A v[STAGE_BATCH];
            int at[STAGE_BATCH];
#pragma unroll
            for (int u = 0; u < STAGE_BATCH; ++u) {
                const T* p = e + u * threads < total ? source(r, j) : nullptr;
                v[u] = p ? to_acc(*p) : A(0);
                at[u] = e + u * threads < total ? index(r, j) : 0;
                r += dr;
                j += dj;
                if (j >= width) {
                    j -= width;
                    ++r;
                }
            }
#pragma unroll
            for (int u = 0; u < STAGE_BATCH; ++u)
                if (e + u * threads < total) dst[at[u]] = v[u];
        }
    }
}

// dY's rows m0 .. m0 + bm at positions l0 .. l0 + chunk of sample s, at as[dy_index(m, p)]; zeros
// outside the tensor.
template <typename T, typename Index>
__device__ __forceinline__ void stage_dy_rows(const T* dy, acc_t<T>* as, int64_t s, int l0, int m0, int bm, int chunk,
                                              int tid, int threads, LineGeo g, Index dy_index) {
    const T* dys = dy + (s * g.out_channels + m0) * (int64_t)g.out_len + l0;
    stage(as, bm, chunk, tid, threads, dy,
          [&](int m, int p) -> const T* {
              return m0 + m < g.out_channels && l0 + p < g.out_len ? dys + (int64_t)m * g.out_len + p : nullptr;
          },
          dy_index);
}

// The window of X's channels c_first .. c_first + c_count that a weight-gradient block's columns
// read for positions l0 .. l0 + chunk of sample s (chunk + k - 1 positions from l0 - pad), at
// xs[c * stride + j]; zeros outside the tensor.  `fallback` is any valid address.
template <typename T>
__device__ __forceinline__ void stage_x_window(const T* x, acc_t<T>* xs, int64_t s, int l0, int chunk, int c_first,
                                               int c_count, int stride, int tid, int threads, LineGeo g,
                                               const T* fallback) {
    const T* xc = x + (s * g.in_channels + c_first) * (int64_t)g.in_len;
    stage(xs, c_count, chunk + g.k - 1, tid, threads, fallback,
          [&](int c, int j) -> const T* {
              const int at = l0 - g.pad + j;
              return at >= 0 && at < g.in_len ? xc + (int64_t)c * g.in_len + at : nullptr;
          },
          [&](int c, int j) { return c * stride + j; });
}

// One chunk of the weight gradient's K (positions l0 .. l0 + chunk of sample s): dY's rows m0 ..
// m0 + bm at as[dy_index(m, p)], and the window of X's channels c_first .. c_first + c_count that
// the block's columns read (chunk + k - 1 positions from l0 - pad) at xs[c * stride + j]; zeros
// outside the tensors.  The caller waits (copies_done, __syncthreads) before reading them.
template <typename T, typename Index>
__device__ __forceinline__ void stage_weight_chunk(const T* dy, const T* x, acc_t<T>* as, acc_t<T>* xs, int64_t s,
                                                   int l0, int m0, int bm, int chunk, int c_first, int c_count,
                                                   int stride, int tid, int threads, LineGeo g, Index dy_index) {
    stage_dy_rows(dy, as, s, l0, m0, bm, chunk, tid, threads, g, dy_index);
    stage_x_window(x, xs, s, l0, chunk, c_first, c_count, stride, tid, threads, g, dy);
}
