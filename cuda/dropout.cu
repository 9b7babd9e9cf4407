// Dropout and DropoutGrad in training mode, with a counter-based generator: Philox4x32-10
// (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011).
//
// Key = the call's 64-bit seed (low word, high word), read from device memory (so a captured
// step draws a new mask on every replay); counter = (g low, g high, 0, 0) for the
// group g of elements 4g .. 4g+3, whose four 32-bit outputs r decide them in order: element
// 4g + j is kept when r[j] >= threshold (threshold = round(ratio * 2^32), so an element is kept
// with probability 1 - ratio).  A mask therefore depends only on the seed and the element's
// index, whatever the launch configuration.  Kept elements are scaled by 1 / (1 - ratio).
#include "common.cuh"

__device__ __forceinline__ uint4 philox4x32_10(uint4 ctr, uint2 key) {
    const unsigned M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        if (round) {
            key.x += W0;
            key.y += W1;
        }
        const unsigned hi0 = __umulhi(M0, ctr.x), lo0 = M0 * ctr.x;
        const unsigned hi1 = __umulhi(M1, ctr.z), lo1 = M1 * ctr.z;
        ctr = make_uint4(hi1 ^ ctr.y ^ key.x, lo1, hi0 ^ ctr.w ^ key.y, lo0);
    }
    return ctr;
}

template <typename T>
__device__ void dropout_impl(const T* x, T* y, bool* mask, int64_t n, acc_t<T> scale, const unsigned* seed,
                             unsigned threshold) {
    const int64_t groups = (n + 3) / 4;
    const uint2 key = make_uint2(seed[0], seed[1]);
    GRID_STRIDE_LOOP(g, groups) {
        const uint4 r = philox4x32_10(make_uint4((unsigned)g, (unsigned)(g >> 32), 0u, 0u), key);
        const unsigned bits[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t i = 4 * g + j;
            if (i < n) {
                const bool keep = bits[j] >= threshold;
                y[i] = from_acc<T>(keep ? to_acc(x[i]) * scale : acc_t<T>(0));
                if (mask != nullptr) mask[i] = keep;
            }
        }
    }
}

template <typename T>
__device__ void dropout_grad_impl(const T* dy, const bool* mask, T* dx, int64_t n, acc_t<T> scale) {
    GRID_STRIDE_LOOP(i, n) dx[i] = from_acc<T>(mask[i] ? to_acc(dy[i]) * scale : acc_t<T>(0));
}

#define DROPOUT(T, S)                                                                                        \
    extern "C" __global__ void dropout_##S(const T* x, T* y, bool* mask, int64_t n, acc_t<T> scale,          \
                                           const unsigned* seed, unsigned threshold) {                       \
        dropout_impl<T>(x, y, mask, n, scale, seed, threshold);                                              \
    }                                                                                                        \
    extern "C" __global__ void dropout_grad_##S(const T* dy, const bool* mask, T* dx, int64_t n,              \
                                                acc_t<T> scale) {                                            \
        dropout_grad_impl<T>(dy, mask, dx, n, scale);                                                        \
    }
MT_FOR_FLOATS(DROPOUT)
