/* Non-temporal ("streaming") stores for minitrain's Cython kernels.  An output much larger
   than the last-level cache is evicted before anyone reads it again, so the read-for-ownership
   that an ordinary store costs on every cache line is wasted bandwidth: a kernel computes a
   block into a small L1-resident buffer with its plain vectorised loop and hands it to
   mt_stream_f/d (or mt_stream), which writes whole aligned vectors with streaming stores (ordinary stores for
   the unaligned head and the tail).  A thread calls mt_stream_fence() once after its last
   streaming store.  When to stream is decided in Python (minitrain/providers/cpu/streaming.py).
   The widest instruction set the compiler targets is used (AVX-512, AVX, SSE2), else memcpy. */
#ifndef MINITRAIN_STREAM_H
#define MINITRAIN_STREAM_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

/* Elements of a kernel's stack buffer: 2-4 KB, a whole number of 64-byte lines. */
#define MT_STREAM_BLOCK 512

/* Leading elements of dst (of elsize bytes) to write with ordinary stores so that the rest
   starts on a 64-byte cache line: blocks of MT_STREAM_BLOCK from there stream whole lines. */
static inline ptrdiff_t mt_stream_head(const void* dst, ptrdiff_t n, size_t elsize) {
    size_t off = (size_t)((uintptr_t)dst & 63);
    ptrdiff_t head = off == 0 || off % elsize ? 0 : (ptrdiff_t)((64 - off) / elsize);
    return head < n ? head : n;
}

/* dst[i] = src[i] for i < n, streaming the aligned vectors: mt_stream_f (float) and
   mt_stream_d (double), each with the widest vectors the compiler targets. */
#if defined(__AVX512F__)
#define MT_STREAM_VECTORS(T, SFX, STREAM, LOAD)                                                  \
    for (; i < n && ((uintptr_t)(dst + i) & 63); i++) dst[i] = src[i];                           \
    for (; i + 64 / (ptrdiff_t)sizeof(T) <= n; i += 64 / sizeof(T))                              \
        STREAM##512_stream_##SFX(dst + i, LOAD##512_loadu_##SFX(src + i));
#elif defined(__AVX__)
#define MT_STREAM_VECTORS(T, SFX, STREAM, LOAD)                                                  \
    for (; i < n && ((uintptr_t)(dst + i) & 31); i++) dst[i] = src[i];                           \
    for (; i + 32 / (ptrdiff_t)sizeof(T) <= n; i += 32 / sizeof(T))                              \
        STREAM##256_stream_##SFX(dst + i, LOAD##256_loadu_##SFX(src + i));
#elif defined(__SSE2__)
#define MT_STREAM_VECTORS(T, SFX, STREAM, LOAD)                                                  \
    for (; i < n && ((uintptr_t)(dst + i) & 15); i++) dst[i] = src[i];                           \
    for (; i + 16 / (ptrdiff_t)sizeof(T) <= n; i += 16 / sizeof(T))                              \
        STREAM##_stream_##SFX(dst + i, LOAD##_loadu_##SFX(src + i));
#else
#define MT_STREAM_VECTORS(T, SFX, STREAM, LOAD)
#endif
#define MT_STREAM_COPY(NAME, T, SFX)                                                             \
    static inline void NAME(T* dst, const T* src, ptrdiff_t n) {                                 \
        ptrdiff_t i = 0;                                                                         \
        MT_STREAM_VECTORS(T, SFX, _mm, _mm)                                                      \
        if (i < n) memcpy(dst + i, src + i, (size_t)(n - i) * sizeof *dst);                      \
    }
MT_STREAM_COPY(mt_stream_f, float, ps)
MT_STREAM_COPY(mt_stream_d, double, pd)

/* Either of the above by element size, for kernels over fused float/double types (elsize is
   sizeof of the element type, a constant, so the branch folds away). */
static inline void mt_stream(void* dst, const void* src, ptrdiff_t n, size_t elsize) {
    if (elsize == sizeof(float))
        mt_stream_f((float*)dst, (const float*)src, n);
    else
        mt_stream_d((double*)dst, (const double*)src, n);
}

/* Orders this thread's streaming stores before whatever it does next (they bypass the
   usual store ordering); call once per thread after its streaming loop. */
static inline void mt_stream_fence(void) {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}
#endif
