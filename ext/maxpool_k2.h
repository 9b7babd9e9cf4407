/* MaxPool and MaxPoolGrad with kernel = stride = 2 along W (ext/pool.pyx: max_pool_k2,
   max_pool_grad_k2), one output row at a time: a C loop for double (and float without AVX2),
   AVX-512 and AVX2 loops for float where the compiler targets them. */
#ifndef MINITRAIN_MAXPOOL_K2_H
#define MINITRAIN_MAXPOOL_K2_H
#include <stddef.h>
#include <stdint.h>

/* MaxPool along one output row, kernel = stride = 2 along W over one input row (two_rows
   0) or two (kernel 2 along H): taps in row-major order, a tap wins when it is greater than
   the best so far or NaN (first maximum, last NaN, as the general loop).  ind (NULL when
   not wanted) gets base + the row-major offset of the winner from r0. */
#define MT_MAXPOOL_K2(NAME, T)                                                                  \
static void NAME(const T* __restrict r0, ptrdiff_t W, int two_rows, T* __restrict y,            \
                 int64_t* __restrict ind, int64_t base, ptrdiff_t n) {                          \
    const T* __restrict r1 = r0 + W;                                                            \
    if (!two_rows && ind == NULL) {                                                             \
        for (ptrdiff_t o = 0; o < n; o++) {                                                     \
            const T a = r0[2 * o], b = r0[2 * o + 1];                                           \
            y[o] = ((b > a) | (b != b)) ? b : a;                                                \
        }                                                                                       \
        return;                                                                                 \
    }                                                                                           \
    if (!two_rows) {                                                                            \
        for (ptrdiff_t o = 0; o < n; o++) {                                                     \
            const T a = r0[2 * o], b = r0[2 * o + 1];                                           \
            const int m = (b > a) | (b != b);                                                   \
            y[o] = m ? b : a;                                                                   \
            ind[o] = base + 2 * o + m;                                                          \
        }                                                                                       \
        return;                                                                                 \
    }                                                                                           \
    for (ptrdiff_t o = 0; o < n; o++) {                                                         \
        T best = r0[2 * o], v;                                                                  \
        int64_t off = 0;                                                                        \
        int m;                                                                                  \
        v = r0[2 * o + 1]; m = (v > best) | (v != v); best = m ? v : best; off = m ? 1 : off;   \
        v = r1[2 * o];     m = (v > best) | (v != v); best = m ? v : best; off = m ? W : off;   \
        v = r1[2 * o + 1]; m = (v > best) | (v != v); best = m ? v : best;                      \
        off = m ? W + 1 : off;                                                                  \
        y[o] = best;                                                                            \
        if (ind != NULL) ind[o] = base + 2 * o + off;                                           \
    }                                                                                           \
}                                                                                               \
/* Its gradient: every element of window o gets dy[o] where ind[o] points, else 0, one          \
   store each.  Returns 0 (having written this row) when some index lies outside its own        \
   window, which MaxPool never produces: the caller then redoes the plane by scattering. */     \
static int NAME##_grad(const T* __restrict dy, const int64_t* __restrict ind,                   \
                       T* __restrict r0, ptrdiff_t W, int two_rows, int64_t base,               \
                       ptrdiff_t n) {                                                           \
    T* __restrict r1 = r0 + W;                                                                  \
    uint64_t bad = 0;                                                                           \
    if (!two_rows) {                                                                            \
        for (ptrdiff_t o = 0; o < n; o++) {                                                     \
            const int64_t d = ind[o] - (base + 2 * o);                                          \
            const T g = dy[o];                                                                  \
            r0[2 * o] = d == 0 ? g : 0;                                                         \
            r0[2 * o + 1] = d == 1 ? g : 0;                                                     \
            bad |= (uint64_t)d > 1;                                                             \
        }                                                                                       \
        return bad == 0;                                                                        \
    }                                                                                           \
    for (ptrdiff_t o = 0; o < n; o++) {                                                         \
        const int64_t d = ind[o] - (base + 2 * o);                                              \
        const T g = dy[o];                                                                      \
        r0[2 * o] = d == 0 ? g : 0;                                                             \
        r0[2 * o + 1] = d == 1 ? g : 0;                                                         \
        r1[2 * o] = d == W ? g : 0;                                                             \
        r1[2 * o + 1] = d == W + 1 ? g : 0;                                                     \
        bad |= ((uint64_t)d > 1) & ((uint64_t)(d - W) > 1);                                     \
    }                                                                                           \
    return bad == 0;                                                                            \
}
MT_MAXPOOL_K2(mt_maxpool_k2_d, double)
/* MaxPool k = s = 2 along W, float32 with AVX-512: 16 outputs per step and the row's tail
   in one masked step, so short rows (14 or 5 outputs in LeNet) never run scalar code. */
#if defined(__AVX512F__)
#include <immintrin.h>
#define MT_HAVE_AVX512_K2 1
static inline __mmask16 mt_head16(ptrdiff_t r) {
    return r >= 16 ? (__mmask16)0xFFFF : r <= 0 ? (__mmask16)0 : (__mmask16)((1u << r) - 1);
}
/* even and odd lanes of the 32 floats p[0..2r) (r outputs) */
static inline void mt_load_pairs(const float* p, ptrdiff_t r, __m512* even, __m512* odd) {
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    const __m512 a = _mm512_maskz_loadu_ps(mt_head16(2 * r), p);
    const __m512 b = _mm512_maskz_loadu_ps(mt_head16(2 * r - 16), p + 16);
    *even = _mm512_permutex2var_ps(a, ie, b);
    *odd = _mm512_permutex2var_ps(a, io, b);
}
/* p[2i] = even[i], p[2i + 1] = odd[i] for i < r */
static inline void mt_store_pairs(float* p, ptrdiff_t r, __m512 even, __m512 odd) {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    _mm512_mask_storeu_ps(p, mt_head16(2 * r), _mm512_permutex2var_ps(even, lo, odd));
    _mm512_mask_storeu_ps(p + 16, mt_head16(2 * r - 16), _mm512_permutex2var_ps(even, hi, odd));
}
/* lanes where v wins over best: greater, or NaN */
static inline __mmask16 mt_wins(__m512 v, __m512 best) {
    return _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
}
static void mt_maxpool_k2_avx512(const float* r0, ptrdiff_t W, int two_rows, float* y,
                                 int64_t* ind, int64_t base, ptrdiff_t n) {
    const __m512i lane2 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (ptrdiff_t o = 0; o < n; o += 16) {
        const ptrdiff_t r = n - o;
        const __mmask16 m = mt_head16(r);
        __m512 best, v, e1, o1;
        mt_load_pairs(r0 + 2 * o, r, &best, &v);
        __mmask16 k = mt_wins(v, best);
        best = _mm512_mask_mov_ps(best, k, v);
        __m512i off = _mm512_maskz_mov_epi32(k, _mm512_set1_epi32(1));
        if (two_rows) {
            mt_load_pairs(r0 + W + 2 * o, r, &e1, &o1);
            k = mt_wins(e1, best);
            best = _mm512_mask_mov_ps(best, k, e1);
            off = _mm512_mask_mov_epi32(off, k, _mm512_set1_epi32((int)W));
            k = mt_wins(o1, best);
            best = _mm512_mask_mov_ps(best, k, o1);
            off = _mm512_mask_mov_epi32(off, k, _mm512_set1_epi32((int)W + 1));
        }
        _mm512_mask_storeu_ps(y + o, m, best);
        if (ind != NULL) {
            const __m512i rel = _mm512_add_epi32(off, lane2);
            const __m512i b = _mm512_set1_epi64(base + 2 * o);
            _mm512_mask_storeu_epi64(ind + o, (__mmask8)m,
                _mm512_add_epi64(b, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(rel))));
            _mm512_mask_storeu_epi64(ind + o + 8, (__mmask8)(m >> 8),
                _mm512_add_epi64(b, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(rel, 1))));
        }
    }
}
/* lanes of the 16 indices ind[0..r) equal to base + 2 lane + d */
static inline __mmask16 mt_points(__m512i lo, __m512i hi, int64_t d) {
    const __m512i vd = _mm512_set1_epi64(d);
    return (__mmask16)(_mm512_cmpeq_epi64_mask(lo, vd) | ((unsigned)_mm512_cmpeq_epi64_mask(hi, vd) << 8));
}
static int mt_maxpool_k2_grad_avx512(const float* dy, const int64_t* ind, float* r0, ptrdiff_t W,
                                     int two_rows, int64_t base, ptrdiff_t n) {
    const __m512i lane2 = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
    unsigned bad = 0;
    for (ptrdiff_t o = 0; o < n; o += 16) {
        const ptrdiff_t r = n - o;
        const __mmask16 m = mt_head16(r);
        const __m512 g = _mm512_maskz_loadu_ps(m, dy + o);
        const __m512i b = _mm512_add_epi64(_mm512_set1_epi64(base + 2 * o), lane2);
        /* offsets of the indices from their windows' first elements */
        const __m512i lo = _mm512_sub_epi64(_mm512_maskz_loadu_epi64((__mmask8)m, ind + o), b);
        const __m512i hi = _mm512_sub_epi64(_mm512_maskz_loadu_epi64((__mmask8)(m >> 8), ind + o + 8),
                                            _mm512_add_epi64(b, _mm512_set1_epi64(16)));
        const __mmask16 k0 = mt_points(lo, hi, 0), k1 = mt_points(lo, hi, 1);
        __mmask16 hit = k0 | k1;
        mt_store_pairs(r0 + 2 * o, r, _mm512_maskz_mov_ps(k0, g), _mm512_maskz_mov_ps(k1, g));
        if (two_rows) {
            const __mmask16 k2 = mt_points(lo, hi, W), k3 = mt_points(lo, hi, W + 1);
            hit |= k2 | k3;
            mt_store_pairs(r0 + W + 2 * o, r, _mm512_maskz_mov_ps(k2, g), _mm512_maskz_mov_ps(k3, g));
        }
        bad |= m & ~hit;
    }
    return bad == 0;
}
#endif

#ifndef MT_HAVE_AVX512_K2
MT_MAXPOOL_K2(mt_maxpool_k2_c_f, float)
#endif
/* MaxPool and MaxPoolGrad k = s = 2 along W, float32 with AVX2 (no AVX-512): 8 windows
   per step, the last step moved back to end with the row (rows of 8 to 15 windows, as in
   LeNet, take two steps and no scalar code); rows under 8 windows take the C loops.  Stores
   stay unmasked: AVX2's masked stores are slow on AMD.  The gradient narrows the
   indices' offsets from their windows to 32 bits (an offset whose high half is not zero
   counts as outside). */
#if defined(__AVX2__) && !defined(MT_HAVE_AVX512_K2)
#include <immintrin.h>
#define MT_HAVE_AVX2_K2 1
/* even and odd elements of p[0..16) */
static inline void mt_load_pairs8(const float* p, __m256* even, __m256* odd) {
    const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}
/* lanes where v wins over best: greater, or NaN */
static inline __m256 mt_wins8(__m256 v, __m256 best) {
    return _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}
static void mt_maxpool_k2_avx2(const float* r0, ptrdiff_t W, int two_rows, float* y,
                               int64_t* ind, int64_t base, ptrdiff_t n) {
    const __m256i lane2 = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    if (n < 8) {
        mt_maxpool_k2_c_f(r0, W, two_rows, y, ind, base, n);
        return;
    }
    for (ptrdiff_t o = 0; o < n; o += 8) {
        o = o + 8 > n ? n - 8 : o;      /* the last step overlaps: equal values rewritten */
        __m256 best, v, e1, o1;
        mt_load_pairs8(r0 + 2 * o, &best, &v);
        __m256 k = mt_wins8(v, best);
        best = _mm256_blendv_ps(best, v, k);
        __m256i off = _mm256_and_si256(_mm256_castps_si256(k), _mm256_set1_epi32(1));
        if (two_rows) {
            mt_load_pairs8(r0 + W + 2 * o, &e1, &o1);
            k = mt_wins8(e1, best);
            best = _mm256_blendv_ps(best, e1, k);
            off = _mm256_blendv_epi8(off, _mm256_set1_epi32((int)W), _mm256_castps_si256(k));
            k = mt_wins8(o1, best);
            best = _mm256_blendv_ps(best, o1, k);
            off = _mm256_blendv_epi8(off, _mm256_set1_epi32((int)W + 1), _mm256_castps_si256(k));
        }
        _mm256_storeu_ps(y + o, best);
        if (ind != NULL) {
            const __m256i rel = _mm256_add_epi32(off, lane2);
            const __m256i b = _mm256_set1_epi64x(base + 2 * o);
            _mm256_storeu_si256((__m256i*)(ind + o),
                _mm256_add_epi64(b, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(rel))));
            _mm256_storeu_si256((__m256i*)(ind + o + 4),
                _mm256_add_epi64(b, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(rel, 1))));
        }
    }
}
/* p[0..16) = even[0], odd[0], even[1], odd[1], ... */
static inline void mt_store_pairs8(float* p, __m256 even, __m256 odd) {
    const __m256 lo = _mm256_unpacklo_ps(even, odd), hi = _mm256_unpackhi_ps(even, odd);
    _mm256_storeu_ps(p, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(p + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}
static int mt_maxpool_k2_grad_avx2(const float* dy, const int64_t* ind, float* r0, ptrdiff_t W,
                                   int two_rows, int64_t base, ptrdiff_t n) {
    const __m256i lane2 = _mm256_setr_epi64x(0, 2, 4, 6);
    const __m256i t0 = _mm256_setzero_si256(), t1 = _mm256_set1_epi32(1);
    const __m256i tw = _mm256_set1_epi32((int)W), tw1 = _mm256_set1_epi32((int)W + 1);
    __m256i bad = _mm256_setzero_si256();
    if (n < 8)
        return mt_maxpool_k2_c_f_grad(dy, ind, r0, W, two_rows, base, n);
    for (ptrdiff_t o = 0; o < n; o += 8) {
        o = o + 8 > n ? n - 8 : o;      /* the last step overlaps: equal values rewritten */
        const __m256 g = _mm256_loadu_ps(dy + o);
        const __m256i b = _mm256_add_epi64(_mm256_set1_epi64x(base + 2 * o), lane2);
        const __m256i lo = _mm256_sub_epi64(_mm256_loadu_si256((const __m256i*)(ind + o)), b);
        const __m256i hi = _mm256_sub_epi64(_mm256_loadu_si256((const __m256i*)(ind + o + 4)),
                                            _mm256_add_epi64(b, _mm256_set1_epi64x(8)));
        /* low and high 32-bit halves of the 8 offsets, in window order */
        const __m256i d = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(
            _mm256_castsi256_ps(lo), _mm256_castsi256_ps(hi), 0x88)), 0xD8);
        const __m256i high = _mm256_castps_si256(_mm256_shuffle_ps(
            _mm256_castsi256_ps(lo), _mm256_castsi256_ps(hi), 0xDD));
        const __m256i k0 = _mm256_cmpeq_epi32(d, t0), k1 = _mm256_cmpeq_epi32(d, t1);
        __m256i hit = _mm256_or_si256(k0, k1);
        mt_store_pairs8(r0 + 2 * o, _mm256_and_ps(_mm256_castsi256_ps(k0), g),
                        _mm256_and_ps(_mm256_castsi256_ps(k1), g));
        if (two_rows) {
            const __m256i k2 = _mm256_cmpeq_epi32(d, tw), k3 = _mm256_cmpeq_epi32(d, tw1);
            hit = _mm256_or_si256(hit, _mm256_or_si256(k2, k3));
            mt_store_pairs8(r0 + W + 2 * o, _mm256_and_ps(_mm256_castsi256_ps(k2), g),
                            _mm256_and_ps(_mm256_castsi256_ps(k3), g));
        }
        bad = _mm256_or_si256(bad, _mm256_or_si256(high, _mm256_andnot_si256(hit, _mm256_set1_epi32(-1))));
    }
    return _mm256_testz_si256(bad, bad);
}
#endif
static void mt_maxpool_k2_f(const float* r0, ptrdiff_t W, int two_rows, float* y, int64_t* ind,
                            int64_t base, ptrdiff_t n) {
#ifdef MT_HAVE_AVX512_K2
    mt_maxpool_k2_avx512(r0, W, two_rows, y, ind, base, n);
#elif defined(MT_HAVE_AVX2_K2)
    mt_maxpool_k2_avx2(r0, W, two_rows, y, ind, base, n);
#else
    mt_maxpool_k2_c_f(r0, W, two_rows, y, ind, base, n);
#endif
}
static int mt_maxpool_k2_f_grad(const float* dy, const int64_t* ind, float* r0, ptrdiff_t W,
                                int two_rows, int64_t base, ptrdiff_t n) {
#ifdef MT_HAVE_AVX512_K2
    return mt_maxpool_k2_grad_avx512(dy, ind, r0, W, two_rows, base, n);
#elif defined(MT_HAVE_AVX2_K2)
    return mt_maxpool_k2_grad_avx2(dy, ind, r0, W, two_rows, base, n);
#else
    return mt_maxpool_k2_c_f_grad(dy, ind, r0, W, two_rows, base, n);
#endif
}

#endif
