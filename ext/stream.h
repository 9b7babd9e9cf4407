/* Non-temporal ("streaming") stores for minitrain's Cython kernels.  An output much larger
   than the last-level cache is evicted before anyone reads it again, so the read-for-ownership
   that an ordinary store costs on every cache line is wasted bandwidth.  A streaming kernel
   computes one vector at a time in the GCC vector types below (the widest the compiler
   targets) and stores it straight from the register with mt_stream_vf/vd: staging blocks in
   an L1 buffer and streaming them from there loses most of the gain (docs/measurements.md,
   "Streaming stores").  A thread calls mt_stream_fence() once after its last streaming store.  When to stream is
   decided in Python (minitrain/providers/cpu/streaming.py). */
#ifndef MINITRAIN_STREAM_H
#define MINITRAIN_STREAM_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
#define MT_VEC_BYTES 64
#elif defined(__AVX__)
#define MT_VEC_BYTES 32
#else
#define MT_VEC_BYTES 16
#endif

/* A vector of floats or doubles, and the integer vector its comparisons yield. */
typedef float mt_vf __attribute__((vector_size(MT_VEC_BYTES)));
typedef double mt_vd __attribute__((vector_size(MT_VEC_BYTES)));
typedef int32_t mt_vfi __attribute__((vector_size(MT_VEC_BYTES)));
typedef int64_t mt_vdi __attribute__((vector_size(MT_VEC_BYTES)));

/* Leading elements of dst (of elsize bytes) to write with ordinary stores so that the rest
   starts on a 64-byte cache line, where every vector store is aligned. */
static inline ptrdiff_t mt_stream_head(const void* dst, ptrdiff_t n, size_t elsize) {
    size_t off = (size_t)((uintptr_t)dst & 63);
    ptrdiff_t head = off == 0 || off % elsize ? 0 : (ptrdiff_t)((64 - off) / elsize);
    return head < n ? head : n;
}

/* A vector from any address (memcpy compiles to one unaligned load). */
static inline mt_vf mt_load_vf(const float* p) { mt_vf v; memcpy(&v, p, sizeof v); return v; }
static inline mt_vd mt_load_vd(const double* p) { mt_vd v; memcpy(&v, p, sizeof v); return v; }

/* *p = v with a streaming store; p is aligned to MT_VEC_BYTES.  Without SSE2 an ordinary
   store. */
#if defined(__AVX512F__)
static inline void mt_stream_vf(float* p, mt_vf v) { _mm512_stream_ps(p, (__m512)v); }
static inline void mt_stream_vd(double* p, mt_vd v) { _mm512_stream_pd(p, (__m512d)v); }
#elif defined(__AVX__)
static inline void mt_stream_vf(float* p, mt_vf v) { _mm256_stream_ps(p, (__m256)v); }
static inline void mt_stream_vd(double* p, mt_vd v) { _mm256_stream_pd(p, (__m256d)v); }
#elif defined(__SSE2__)
static inline void mt_stream_vf(float* p, mt_vf v) { _mm_stream_ps(p, (__m128)v); }
static inline void mt_stream_vd(double* p, mt_vd v) { _mm_stream_pd(p, (__m128d)v); }
#else
static inline void mt_stream_vf(float* p, mt_vf v) { memcpy(p, &v, sizeof v); }
static inline void mt_stream_vd(double* p, mt_vd v) { memcpy(p, &v, sizeof v); }
#endif

/* Orders this thread's streaming stores before whatever it does next (they bypass the
   usual store ordering); call once per thread after its streaming loop. */
static inline void mt_stream_fence(void) {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}
#endif
