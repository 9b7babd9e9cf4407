/* The direct convolution's SIMD microkernels and row helpers (ext/conv_direct.pyx): kernel A
   (output rows from shifted taps) and kernel B (weight-gradient dot products), register
   blocks sized for the compiler's vector width, float and double from one macro each. */
#ifndef MINITRAIN_CONV_DIRECT_H
#define MINITRAIN_CONV_DIRECT_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
#define MT_VBYTES 64
#elif defined(__AVX__)
#define MT_VBYTES 32
#else
#define MT_VBYTES 16
#endif
typedef float mt_vf __attribute__((vector_size(MT_VBYTES)));
typedef float mt_vfu __attribute__((vector_size(MT_VBYTES), aligned(4)));
typedef double mt_vd __attribute__((vector_size(MT_VBYTES)));
typedef double mt_vdu __attribute__((vector_size(MT_VBYTES), aligned(8)));
/* Keep a loaded vector in a register: without this GCC folds the load into every FMA
   that uses it, and unaligned loads split across cache lines then bound the loop. */
#if defined(__x86_64__) || defined(__i386__)
#define MT_IN_REGISTER(v) __asm__("" : "+v"(v))
#else
#define MT_IN_REGISTER(v) ((void)0)
#endif
#define MT_VWF (MT_VBYTES / 4)
#define MT_VWD (MT_VBYTES / 8)

/* Kernel A microkernel: y[r, p] for r < mvalid, p in [p0, p1) stepping NV*VW, summing
   over the nct (channel, tap) pairs i: x[p + coff[i]] times the MR weights wp[i*MR ..]. */
#define MT_KA(NAME, T, V, VU, VW, MR, NV)                                                       \
static void NAME(const T* restrict x, const ptrdiff_t* restrict coff, ptrdiff_t nct,            \
                 const T* restrict wp, T* restrict y, ptrdiff_t ldy, ptrdiff_t p0,              \
                 ptrdiff_t p1, ptrdiff_t mvalid)                                                \
{                                                                                               \
    for (ptrdiff_t p = p0; p < p1; p += (NV) * (VW)) {                                          \
        V acc[MR][NV];                                                                          \
        _Pragma("GCC unroll 16") for (int r = 0; r < (MR); r++)                                 \
            _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++) acc[r][v] = (V){0};         \
        const T* restrict wc = wp;                                                              \
        const T* restrict xq = x + p;                                                           \
        for (ptrdiff_t i = 0; i < nct; i++, wc += (MR)) {                                       \
            const T* restrict xp = xq + coff[i];                                                \
            V xv[NV];                                                                           \
            _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++)                             \
                xv[v] = *(const VU*)(xp + v * (VW));                                            \
            _Pragma("GCC unroll 16") for (int r = 0; r < (MR); r++) {                           \
                T w = wc[r];                                                                    \
                _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++)                         \
                    acc[r][v] += xv[v] * w;                                                     \
            }                                                                                   \
        }                                                                                       \
        for (int r = 0; r < (MR); r++) {                                                        \
            if (r >= mvalid) break;                                                             \
            _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++)                             \
                *(VU*)(y + r * ldy + p + v * (VW)) = acc[r][v];                                 \
        }                                                                                       \
    }                                                                                           \
}

/* The sum of a vector's lanes, as a tree of halvings: kernel B ends every call with MR2 x TB of
   these, and a chain of scalar adds there costs as much as hundreds of FMAs. */
#if MT_VBYTES == 64 && defined(__AVX512F__)
#include <immintrin.h>
static inline float float_lane_sum(mt_vf v) { return _mm512_reduce_add_ps((__m512)v); }
static inline double double_lane_sum(mt_vd v) { return _mm512_reduce_add_pd((__m512d)v); }
#elif MT_VBYTES == 32 && defined(__AVX__)
#include <immintrin.h>
static inline float float_lane_sum(mt_vf v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128((__m256)v), _mm256_extractf128_ps((__m256)v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline double double_lane_sum(mt_vd v)
{
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128((__m256d)v), _mm256_extractf128_pd((__m256d)v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
#else
#define MT_LANE_SUM(T, V, VW)                                                                   \
static inline T T##_lane_sum(V v)                                                               \
{                                                                                               \
    T s[VW];                                                                                    \
    memcpy(s, &v, sizeof v);                                                                    \
    for (int w = (VW) / 2; w > 0; w /= 2)                                                       \
        for (int i = 0; i < w; i++) s[i] += s[i + w];                                           \
    return s[0];                                                                                \
}
MT_LANE_SUM(float, mt_vf, MT_VWF)
MT_LANE_SUM(double, mt_vd, MT_VWD)
#undef MT_LANE_SUM
#endif

/* Kernel B microkernel: out[r * ldo + t] += sum over samples b and p < plen of
   dy[r, b * L + p] x[b * L + p + off[t]]. */
#define MT_KB(NAME, T, V, VU, VW, MR2, TB)                                                      \
static void NAME(const T* restrict dy, ptrdiff_t ldd, const T* restrict x,                      \
                 const ptrdiff_t* restrict off, ptrdiff_t nb, ptrdiff_t L, ptrdiff_t plen,      \
                 T* restrict out, ptrdiff_t ldo)                                                \
{                                                                                               \
    V acc[MR2][TB];                                                                             \
    _Pragma("GCC unroll 16") for (int r = 0; r < (MR2); r++)                                    \
        _Pragma("GCC unroll 16") for (int t = 0; t < (TB); t++) acc[r][t] = (V){0};             \
    for (ptrdiff_t b = 0; b < nb; b++) {                                                        \
        const T* restrict d0 = dy + b * L;                                                      \
        const T* restrict x0 = x + b * L;                                                       \
        for (ptrdiff_t p = 0; p < plen; p += (VW)) {                                            \
            V xv[TB];                                                                           \
            _Pragma("GCC unroll 16") for (int t = 0; t < (TB); t++) {                           \
                xv[t] = *(const VU*)(x0 + p + off[t]);                                          \
                MT_IN_REGISTER(xv[t]);                                                          \
            }                                                                                   \
            _Pragma("GCC unroll 16") for (int r = 0; r < (MR2); r++) {                          \
                V d = *(const VU*)(d0 + r * ldd + p);                                           \
                MT_IN_REGISTER(d);                                                              \
                _Pragma("GCC unroll 16") for (int t = 0; t < (TB); t++)                         \
                    acc[r][t] += d * xv[t];                                                     \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
    _Pragma("GCC unroll 16") for (int r = 0; r < (MR2); r++)                                    \
        _Pragma("GCC unroll 16") for (int t = 0; t < (TB); t++)                                 \
            out[r * ldo + t] += T##_lane_sum(acc[r][t]);                                        \
}

/* Register blocks: AVX-512 has 32 vector registers, the others 16 (all of them used). */
#if MT_VBYTES == 64
#define MT_A_VARIANTS(X, T, V, VU, VW)                                                          \
    X(T##_a8, T, V, VU, VW, 8, 3) X(T##_a6, T, V, VU, VW, 6, 4) X(T##_a4, T, V, VU, VW, 4, 6)   \
    X(T##_a2, T, V, VU, VW, 2, 8) X(T##_a1, T, V, VU, VW, 1, 12)
static const int mt_a_mr[5] = {8, 6, 4, 2, 1};
static const int mt_a_nv[5] = {3, 4, 6, 8, 12};
/* one vector of points per row block: the points past a pass's last whole block */
#define MT_A_TAILS(X, T, V, VU, VW)                                                             \
    X(T##_a8t, T, V, VU, VW, 8, 1) X(T##_a6t, T, V, VU, VW, 6, 1) X(T##_a4t, T, V, VU, VW, 4, 1) \
    X(T##_a2t, T, V, VU, VW, 2, 1) X(T##_a1t, T, V, VU, VW, 1, 1)
/* kernel B: row blocks of 8 with up to 3 taps, single rows with up to 8 taps, or row blocks
   of 6 with up to 4 taps (for tap counts that are multiples of 4, not of 3) */
#define MT_B_VARIANTS(X, T, V, VU, VW)                                                          \
    X(T##_b8_1, T, V, VU, VW, 8, 1) X(T##_b8_2, T, V, VU, VW, 8, 2) X(T##_b8_3, T, V, VU, VW, 8, 3) \
    X(T##_b1_1, T, V, VU, VW, 1, 1) X(T##_b1_2, T, V, VU, VW, 1, 2) X(T##_b1_3, T, V, VU, VW, 1, 3) \
    X(T##_b1_4, T, V, VU, VW, 1, 4) X(T##_b1_5, T, V, VU, VW, 1, 5) X(T##_b1_6, T, V, VU, VW, 1, 6) \
    X(T##_b1_7, T, V, VU, VW, 1, 7) X(T##_b1_8, T, V, VU, VW, 1, 8)                             \
    X(T##_b6_1, T, V, VU, VW, 6, 1) X(T##_b6_2, T, V, VU, VW, 6, 2) X(T##_b6_3, T, V, VU, VW, 6, 3) \
    X(T##_b6_4, T, V, VU, VW, 6, 4)
#define MT_B_TABLE(T) {T##_b8_1, T##_b8_2, T##_b8_3, 0, 0, 0, 0, 0,                             \
                       T##_b1_1, T##_b1_2, T##_b1_3, T##_b1_4, T##_b1_5, T##_b1_6, T##_b1_7, T##_b1_8, \
                       T##_b6_1, T##_b6_2, T##_b6_3, T##_b6_4, 0, 0, 0, 0}
static const int mt_b_rows[3] = {8, 1, 6};
static const int mt_b_tbmax[3] = {3, 8, 4};
#else
#define MT_A_VARIANTS(X, T, V, VU, VW)                                                          \
    X(T##_a8, T, V, VU, VW, 4, 3) X(T##_a6, T, V, VU, VW, 3, 3) X(T##_a4, T, V, VU, VW, 2, 5)   \
    X(T##_a2, T, V, VU, VW, 2, 4) X(T##_a1, T, V, VU, VW, 1, 6)
static const int mt_a_mr[5] = {4, 3, 2, 2, 1};
static const int mt_a_nv[5] = {3, 3, 5, 4, 6};
#define MT_A_TAILS(X, T, V, VU, VW)                                                             \
    X(T##_a8t, T, V, VU, VW, 4, 1) X(T##_a6t, T, V, VU, VW, 3, 1) X(T##_a4t, T, V, VU, VW, 2, 1) \
    X(T##_a2t, T, V, VU, VW, 2, 1) X(T##_a1t, T, V, VU, VW, 1, 1)
#define MT_B_VARIANTS(X, T, V, VU, VW)                                                          \
    X(T##_b8_1, T, V, VU, VW, 4, 1) X(T##_b8_2, T, V, VU, VW, 4, 2) X(T##_b8_3, T, V, VU, VW, 4, 3) \
    X(T##_b1_1, T, V, VU, VW, 1, 1) X(T##_b1_2, T, V, VU, VW, 1, 2) X(T##_b1_3, T, V, VU, VW, 1, 3) \
    X(T##_b1_4, T, V, VU, VW, 1, 4)                                                             \
    X(T##_b6_1, T, V, VU, VW, 2, 1) X(T##_b6_2, T, V, VU, VW, 2, 2) X(T##_b6_3, T, V, VU, VW, 2, 3) \
    X(T##_b6_4, T, V, VU, VW, 2, 4)
#define MT_B_TABLE(T) {T##_b8_1, T##_b8_2, T##_b8_3, 0, 0, 0, 0, 0,                             \
                       T##_b1_1, T##_b1_2, T##_b1_3, T##_b1_4, 0, 0, 0, 0,                      \
                       T##_b6_1, T##_b6_2, T##_b6_3, T##_b6_4, 0, 0, 0, 0}
static const int mt_b_rows[3] = {4, 1, 2};
static const int mt_b_tbmax[3] = {3, 4, 4};
#endif

MT_A_VARIANTS(MT_KA, float, mt_vf, mt_vfu, MT_VWF)
MT_A_VARIANTS(MT_KA, double, mt_vd, mt_vdu, MT_VWD)
MT_A_TAILS(MT_KA, float, mt_vf, mt_vfu, MT_VWF)
MT_A_TAILS(MT_KA, double, mt_vd, mt_vdu, MT_VWD)
MT_B_VARIANTS(MT_KB, float, mt_vf, mt_vfu, MT_VWF)
MT_B_VARIANTS(MT_KB, double, mt_vd, mt_vdu, MT_VWD)

typedef void (*mt_ka_f)(const float*, const ptrdiff_t*, ptrdiff_t, const float*, float*, ptrdiff_t,
                        ptrdiff_t, ptrdiff_t, ptrdiff_t);
typedef void (*mt_ka_d)(const double*, const ptrdiff_t*, ptrdiff_t, const double*, double*, ptrdiff_t,
                        ptrdiff_t, ptrdiff_t, ptrdiff_t);
static const mt_ka_f mt_ka_float[5] = {float_a8, float_a6, float_a4, float_a2, float_a1};
static const mt_ka_d mt_ka_double[5] = {double_a8, double_a6, double_a4, double_a2, double_a1};
static const mt_ka_f mt_ka_tail_float[5] = {float_a8t, float_a6t, float_a4t, float_a2t, float_a1t};
static const mt_ka_d mt_ka_tail_double[5] = {double_a8t, double_a6t, double_a4t, double_a2t, double_a1t};
typedef void (*mt_kb_f)(const float*, ptrdiff_t, const float*, const ptrdiff_t*, ptrdiff_t, ptrdiff_t,
                        ptrdiff_t, float*, ptrdiff_t);
typedef void (*mt_kb_d)(const double*, ptrdiff_t, const double*, const ptrdiff_t*, ptrdiff_t, ptrdiff_t,
                        ptrdiff_t, double*, ptrdiff_t);
static const mt_kb_f mt_kb_float[24] = MT_B_TABLE(float);
static const mt_kb_d mt_kb_double[24] = MT_B_TABLE(double);

/* Kernel A over points [p0, p1) (a multiple of the vector width): whole NV-vector blocks, then
   the rest one vector at a time, so that no pass computes more than a vector past its end. */
#define MT_KA_CALL(T, VW)                                                                       \
static void mt_ka_call_##T(int variant, const T* x, const ptrdiff_t* coff, ptrdiff_t nct,       \
                           const T* wp, T* y, ptrdiff_t ldy, ptrdiff_t p0, ptrdiff_t p1,        \
                           ptrdiff_t mvalid)                                                    \
{                                                                                               \
    ptrdiff_t block = (ptrdiff_t)mt_a_nv[variant] * (VW), whole = p0 + (p1 - p0) / block * block; \
    if (whole > p0) mt_ka_##T[variant](x, coff, nct, wp, y, ldy, p0, whole, mvalid);            \
    if (p1 > whole) mt_ka_tail_##T[variant](x, coff, nct, wp, y, ldy, whole, p1, mvalid);       \
}
MT_KA_CALL(float, MT_VWF)
MT_KA_CALL(double, MT_VWD)
#undef MT_KA_CALL
#define MT_KB_CALL(T)                                                                           \
static void mt_kb_call_##T(int tb, const T* dy, ptrdiff_t ldd, const T* x, const ptrdiff_t* off, \
                           ptrdiff_t nb, ptrdiff_t L, ptrdiff_t plen, T* out, ptrdiff_t ldo)    \
{ mt_kb_##T[tb - 1](dy, ldd, x, off, nb, L, plen, out, ldo); }
MT_KB_CALL(float)
MT_KB_CALL(double)
#undef MT_KB_CALL
/* Row copies with restrict pointers, so that GCC vectorizes them. */
/* Rows are short: plain vectorized loops, never memcpy/memset calls. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#define MT_NO_LIBCALLS __attribute__((optimize("no-tree-loop-distribute-patterns"),             \
                                      target("prefer-vector-width=512")))
#else
#define MT_NO_LIBCALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
#define MT_ROWOPS(T)                                                                            \
static MT_NO_LIBCALLS void T##_row_pack_loops(T* restrict row, const T* restrict src, ptrdiff_t n,    \
                                        ptrdiff_t lo, ptrdiff_t hi, ptrdiff_t stride)           \
{                                                                                               \
    for (ptrdiff_t i = 0; i < lo; i++) row[i] = 0;                                              \
    if (stride == 1) for (ptrdiff_t i = lo; i < hi; i++) row[i] = src[i];                       \
    else if (stride == 2) for (ptrdiff_t i = lo; i < hi; i++) row[i] = src[2 * i];              \
    else for (ptrdiff_t i = lo; i < hi; i++) row[i] = src[i * stride];                          \
    for (ptrdiff_t i = hi; i < n; i++) row[i] = 0;                                              \
}                                                                                               \
static MT_NO_LIBCALLS void T##_row_out_loops(T* restrict dst, const T* restrict src, ptrdiff_t n,     \
                                       ptrdiff_t stride, T bias)                                \
{                                                                                               \
    if (stride == 1) for (ptrdiff_t i = 0; i < n; i++) dst[i] = src[i] + bias;                  \
    else if (stride == 2) for (ptrdiff_t i = 0; i < n; i++) dst[2 * i] = src[i] + bias;         \
    else for (ptrdiff_t i = 0; i < n; i++) dst[i * stride] = src[i] + bias;                     \
}                                                                                               \
static MT_NO_LIBCALLS void T##_zero(T* restrict dst, ptrdiff_t n)                               \
{                                                                                               \
    for (ptrdiff_t i = 0; i < n; i++) dst[i] = 0;                                               \
}                                                                                               \
/* Two stride-2 phase rows in one pass: r0[i] = src[2i] on [lo0, hi0), r1[i] = src[2i+1]        \
   on [lo1, hi1), zero elsewhere in r0[:n] and r1[:n]. */                                       \
static MT_NO_LIBCALLS void T##_row_pack2_loops(T* restrict r0, T* restrict r1, const T* restrict src, \
                                         ptrdiff_t n, ptrdiff_t lo0, ptrdiff_t hi0,             \
                                         ptrdiff_t lo1, ptrdiff_t hi1)                          \
{                                                                                               \
    ptrdiff_t lo = lo0 > lo1 ? lo0 : lo1, hi = hi0 < hi1 ? hi0 : hi1;                           \
    if (hi < lo) hi = lo;                                                                       \
    for (ptrdiff_t i = 0; i < lo; i++) {                                                        \
        r0[i] = (i >= lo0 && i < hi0) ? src[2 * i] : 0;                                         \
        r1[i] = (i >= lo1 && i < hi1) ? src[2 * i + 1] : 0;                                     \
    }                                                                                           \
    for (ptrdiff_t i = lo; i < hi; i++) { r0[i] = src[2 * i]; r1[i] = src[2 * i + 1]; }         \
    for (ptrdiff_t i = hi; i < n; i++) {                                                        \
        r0[i] = (i >= lo0 && i < hi0) ? src[2 * i] : 0;                                         \
        r1[i] = (i >= lo1 && i < hi1) ? src[2 * i + 1] : 0;                                     \
    }                                                                                           \
}
MT_ROWOPS(float)
MT_ROWOPS(double)
/* The row copies as the plain loops above: double everywhere, float without AVX-512. */
#define MT_ROWOPS_PLAIN(T)                                                                      \
static void T##_row_pack(T* restrict row, const T* restrict src, ptrdiff_t n, ptrdiff_t lo,     \
                         ptrdiff_t hi, ptrdiff_t stride)                                        \
{ T##_row_pack_loops(row, src, n, lo, hi, stride); }                                            \
static void T##_row_out(T* restrict dst, const T* restrict src, ptrdiff_t n, ptrdiff_t stride,  \
                        T bias)                                                                 \
{ T##_row_out_loops(dst, src, n, stride, bias); }                                               \
static void T##_row_pack2(T* restrict r0, T* restrict r1, const T* restrict src, ptrdiff_t n,   \
                          ptrdiff_t lo0, ptrdiff_t hi0, ptrdiff_t lo1, ptrdiff_t hi1)           \
{ T##_row_pack2_loops(r0, r1, src, n, lo0, hi0, lo1, hi1); }

/* The row copies of float with AVX-512: one masked load and store per 16 points (a row of the
   grid is a few dozen points, so the loops' scalar heads and tails would cost as much as the
   copy); a stride-2 gather takes the even lanes of two masked loads.  Masked-off lanes are
   neither read nor written. */
#if MT_VBYTES == 64 && defined(__AVX512F__)
#include <immintrin.h>
/* Lanes j of a 16-lane block starting at point i with lo <= i + j < hi; branch-free, since
   the bounds change from row to row and mispredicted branches would cost more than the copy. */
static inline __mmask16 mt_lanes(ptrdiff_t i, ptrdiff_t lo, ptrdiff_t hi)
{
    ptrdiff_t a = lo - i, b = hi - i;
    a = a < 0 ? 0 : a;
    a = a > 16 ? 16 : a;
    b = b < 0 ? 0 : b;
    b = b > 16 ? 16 : b;
    return (__mmask16)(_bzhi_u32(0xFFFFu, (unsigned)b) & ~_bzhi_u32(0xFFFFu, (unsigned)a));
}
static inline void float_row_pack(float* restrict row, const float* restrict src, ptrdiff_t n,
                                  ptrdiff_t lo, ptrdiff_t hi, ptrdiff_t stride)
{
    if (stride == 1) {          /* plain loads and stores where a block lies inside [lo, hi) */
        for (ptrdiff_t i = 0; i < n; i += 16) {
            if (i >= lo && i + 16 <= hi && i + 16 <= n)
                _mm512_storeu_ps(row + i, _mm512_loadu_ps(src + i));
            else
                _mm512_mask_storeu_ps(row + i, mt_lanes(i, 0, n),
                                      _mm512_maskz_loadu_ps(mt_lanes(i, lo, hi), src + i));
        }
    } else if (stride == 2) {
        const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        for (ptrdiff_t i = 0; i < n; i += 16) {
            __mmask16 m = mt_lanes(i, lo, hi);
            uint32_t wide = _pdep_u32(m, 0x55555555u);            /* lane j -> element 2j */
            __m512 a = _mm512_maskz_loadu_ps((__mmask16)(wide & 0xFFFFu), src + 2 * i);
            __m512 b = _mm512_maskz_loadu_ps((__mmask16)(wide >> 16), src + 2 * i + 16);
            _mm512_mask_storeu_ps(row + i, mt_lanes(i, 0, n), _mm512_permutex2var_ps(a, even, b));
        }
    } else {
        float_row_pack_loops(row, src, n, lo, hi, stride);
    }
}
/* Both phases from the same two loads: the even lanes to r0, the odd ones to r1. */
static void float_row_pack2(float* restrict r0, float* restrict r1, const float* restrict src, ptrdiff_t n,
                            ptrdiff_t lo0, ptrdiff_t hi0, ptrdiff_t lo1, ptrdiff_t hi1)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (ptrdiff_t i = 0; i < n; i += 16) {
        __mmask16 m0 = mt_lanes(i, lo0, hi0), m1 = mt_lanes(i, lo1, hi1), out = mt_lanes(i, 0, n);
        uint32_t wide = _pdep_u32(m0, 0x55555555u) | _pdep_u32(m1, 0xAAAAAAAAu);
        __m512 a = _mm512_maskz_loadu_ps((__mmask16)(wide & 0xFFFFu), src + 2 * i);
        __m512 b = _mm512_maskz_loadu_ps((__mmask16)(wide >> 16), src + 2 * i + 16);
        _mm512_mask_storeu_ps(r0 + i, out, _mm512_maskz_permutex2var_ps(m0, a, even, b));
        _mm512_mask_storeu_ps(r1 + i, out, _mm512_maskz_permutex2var_ps(m1, a, odd, b));
    }
}
static void float_row_out(float* restrict dst, const float* restrict src, ptrdiff_t n, ptrdiff_t stride,
                          float bias)
{
    const __m512 b = _mm512_set1_ps(bias);
    ptrdiff_t i = 0;
    if (stride == 2) {          /* 8 points to the even lanes of 16: each duplicated, half stored */
        const __m512i twice = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        for (; i < n; i += 8) {
            __mmask16 even = (__mmask16)_pdep_u32(mt_lanes(i, 0, n) & 0xFFu, 0x5555u);
            __m512 v = _mm512_castps256_ps512(_mm256_maskz_loadu_ps((__mmask8)mt_lanes(i, 0, n), src + i));
            _mm512_mask_storeu_ps(dst + 2 * i, even, _mm512_add_ps(_mm512_permutexvar_ps(twice, v), b));
        }
        return;
    }
    if (stride != 1) {
        float_row_out_loops(dst, src, n, stride, bias);
        return;
    }
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_add_ps(_mm512_loadu_ps(src + i), b));
    if (i < n) {
        __mmask16 m = mt_lanes(i, 0, n);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, src + i), b));
    }
}
#else
MT_ROWOPS_PLAIN(float)
#endif
/* One image row into the KU rows (dstride apart) of the width-unrolled grid:
   dst[kw * dstride + i] = src[i * stride + kw * dw - pad] where that column lies in [0, width),
   else 0, for i < n. */
#define MT_ROW_UNROLL(T)                                                                        \
static void T##_row_unroll(T* restrict dst, ptrdiff_t dstride, const T* restrict src,           \
                           ptrdiff_t width, ptrdiff_t ku, ptrdiff_t n, ptrdiff_t stride,        \
                           ptrdiff_t dw, ptrdiff_t pad)                                         \
{                                                                                               \
    for (ptrdiff_t kw = 0; kw < ku; kw++) {                                                     \
        ptrdiff_t shift = kw * dw - pad;                                                        \
        ptrdiff_t lo = 0, hi = 0;           /* divisions only for strides past 2 */              \
        if (stride == 1) {                                                                      \
            lo = shift < 0 ? -shift : 0;                                                        \
            hi = width - shift;                                                                 \
        } else if (stride == 2) {                                                               \
            lo = shift < 0 ? (1 - shift) >> 1 : 0;                                              \
            hi = width - 1 - shift >= 0 ? ((width - 1 - shift) >> 1) + 1 : 0;                   \
        } else {                                                                                \
            lo = shift < 0 ? (stride - 1 - shift) / stride : 0;                                 \
            hi = width - 1 - shift >= 0 ? (width - 1 - shift) / stride + 1 : 0;                 \
        }                                                                                       \
        if (hi < 0) hi = 0;                                                                     \
        if (hi > n) hi = n;                                                                     \
        if (lo > hi) lo = hi;                                                                   \
        T##_row_pack(dst + kw * dstride, src + shift, n, lo, hi, stride);                       \
    }                                                                                           \
}
MT_ROWOPS_PLAIN(double)
MT_ROW_UNROLL(double)
#if MT_VBYTES == 64 && defined(__AVX512F__)
#define float_row_unroll float_row_unroll_rows
MT_ROW_UNROLL(float)
#undef float_row_unroll
/* A row whose KU copies all come from one 16-lane window of the image row (stride 1, n + (KU - 1)
   * dw <= 16: LeNet-sized rows) is loaded once and each copy shifted out of the register. */
static void float_row_unroll(float* restrict dst, ptrdiff_t dstride, const float* restrict src,
                             ptrdiff_t width, ptrdiff_t ku, ptrdiff_t n, ptrdiff_t stride, ptrdiff_t dw,
                             ptrdiff_t pad)
{
    ptrdiff_t span = n + (ku - 1) * dw;
    if (stride != 1 || span > 16) {
        float_row_unroll_rows(dst, dstride, src, width, ku, n, stride, dw, pad);
        return;
    }
    /* lane j holds column j - pad of the image row (zero outside [0, width)) */
    __m512 row = _mm512_maskz_loadu_ps(mt_lanes(0, pad, pad + width) & mt_lanes(0, 0, span), src - pad);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __mmask16 out = mt_lanes(0, 0, n);
    for (ptrdiff_t kw = 0; kw < ku; kw++)
        _mm512_mask_storeu_ps(dst + kw * dstride, out,
                              _mm512_permutexvar_ps(_mm512_add_epi32(lane, _mm512_set1_epi32((int)(kw * dw))), row));
}
#else
MT_ROW_UNROLL(float)
#endif
static int mt_vbytes(void) { return MT_VBYTES; }
static int mt_a_mr_of(int v) { return mt_a_mr[v]; }
static int mt_a_nv_of(int v) { return mt_a_nv[v]; }
static int mt_b_rows_of(int v) { return mt_b_rows[v]; }
static int mt_b_tbmax_of(int v) { return mt_b_tbmax[v]; }

#endif
