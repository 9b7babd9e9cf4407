/* Depthwise convolution at stride 1 (ext/conv_depthwise.pyx): the image rows are read in
   place, the pads are lanes masked off at the row ends and rows outside the image skipped, and
   the outputs are written straight into Y.  Float (suffix _f) and double (_d) from one macro
   each; the vector width follows the compiler's target through GCC vector extensions, with the
   masked loads and stores of AVX-512 or AVX2 where the target has them and lane-by-lane ones
   elsewhere (SSE2, NEON). */
#ifndef MINITRAIN_CONV_DEPTHWISE_H
#define MINITRAIN_CONV_DEPTHWISE_H
#include <stddef.h>
#include <stdint.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
#define MT_DW_VBYTES 64
#elif defined(__AVX__)
#define MT_DW_VBYTES 32
#else
#define MT_DW_VBYTES 16
#endif
#define MT_DW_VWF (MT_DW_VBYTES / 4)
#define MT_DW_VWD (MT_DW_VBYTES / 8)
typedef float mt_dw_vf __attribute__((vector_size(MT_DW_VBYTES)));
typedef float mt_dw_vfu __attribute__((vector_size(MT_DW_VBYTES), aligned(4)));
typedef double mt_dw_vd __attribute__((vector_size(MT_DW_VBYTES)));
typedef double mt_dw_vdu __attribute__((vector_size(MT_DW_VBYTES), aligned(8)));

/* The geometry (ext/conv.pyx's layout, stride 1): G groups, C image channels and M column
   channels per group; column point (od, oh, ow) reads image point (od + kd*DD - PD, ...). */
typedef struct {
    ptrdiff_t G, C, M, ID, IH, IW, OD, OH, OW, KD, KH, KW, DD, DH, DW, PD, PH, PW;
} mt_dw_geom;

/* Lane masks: mt_dw_mask_of_*(lo, hi) selects lanes [lo, hi) (none when hi <= lo); a masked
   load reads those lanes and zeroes the others, a masked store writes only those, and neither
   touches the memory of the other lanes.  AVX-512 keeps a mask in a k register, AVX2 in a
   vector; elsewhere the lanes go one by one (whole vectors when every lane is selected). */
#if defined(__AVX512F__)
typedef uint16_t mt_dw_mask_f;
typedef uint8_t mt_dw_mask_d;
static inline uint32_t mt_dw_bits(int lo, int hi) { return hi <= lo ? 0 : ((1u << hi) - 1) & ~((1u << lo) - 1); }
static inline mt_dw_mask_f mt_dw_mask_of_f(int lo, int hi) { return (mt_dw_mask_f)mt_dw_bits(lo, hi); }
static inline mt_dw_mask_d mt_dw_mask_of_d(int lo, int hi) { return (mt_dw_mask_d)mt_dw_bits(lo, hi); }
static inline mt_dw_vf mt_dw_mload_f(const float* p, mt_dw_mask_f m)
{ return (mt_dw_vf)_mm512_maskz_loadu_ps((__mmask16)m, p); }
static inline mt_dw_vd mt_dw_mload_d(const double* p, mt_dw_mask_d m)
{ return (mt_dw_vd)_mm512_maskz_loadu_pd((__mmask8)m, p); }
static inline void mt_dw_mstore_f(float* p, mt_dw_vf v, mt_dw_mask_f m)
{ _mm512_mask_storeu_ps(p, (__mmask16)m, (__m512)v); }
static inline void mt_dw_mstore_d(double* p, mt_dw_vd v, mt_dw_mask_d m)
{ _mm512_mask_storeu_pd(p, (__mmask8)m, (__m512d)v); }
#elif defined(__AVX2__)
typedef int mt_dw_mask_f __attribute__((vector_size(32)));
typedef long long mt_dw_mask_d __attribute__((vector_size(32)));
static inline mt_dw_mask_f mt_dw_mask_of_f(int lo, int hi)
{ const mt_dw_mask_f lane = {0, 1, 2, 3, 4, 5, 6, 7}; return (lane >= lo) & (lane < hi); }
static inline mt_dw_mask_d mt_dw_mask_of_d(int lo, int hi)
{ const mt_dw_mask_d lane = {0, 1, 2, 3}; return (lane >= lo) & (lane < hi); }
static inline mt_dw_vf mt_dw_mload_f(const float* p, mt_dw_mask_f m)
{ return (mt_dw_vf)_mm256_maskload_ps(p, (__m256i)m); }
static inline mt_dw_vd mt_dw_mload_d(const double* p, mt_dw_mask_d m)
{ return (mt_dw_vd)_mm256_maskload_pd(p, (__m256i)m); }
static inline void mt_dw_mstore_f(float* p, mt_dw_vf v, mt_dw_mask_f m)
{ _mm256_maskstore_ps(p, (__m256i)m, (__m256)v); }
static inline void mt_dw_mstore_d(double* p, mt_dw_vd v, mt_dw_mask_d m)
{ _mm256_maskstore_pd(p, (__m256i)m, (__m256d)v); }
#else
#define MT_DW_LANEWISE(SUFFIX, T, V, VU, VW)                                                    \
typedef struct { int lo, hi; } mt_dw_mask_##SUFFIX;                                             \
static inline mt_dw_mask_##SUFFIX mt_dw_mask_of_##SUFFIX(int lo, int hi)                        \
{ mt_dw_mask_##SUFFIX m = {lo, hi}; return m; }                                                 \
static inline V mt_dw_mload_##SUFFIX(const T* p, mt_dw_mask_##SUFFIX m)                         \
{                                                                                               \
    if (m.lo == 0 && m.hi == (VW)) return *(const VU*)p;                                        \
    V v = {0};                                                                                  \
    for (int i = m.lo; i < m.hi; i++) v[i] = p[i];                                              \
    return v;                                                                                   \
}                                                                                               \
static inline void mt_dw_mstore_##SUFFIX(T* p, V v, mt_dw_mask_##SUFFIX m)                      \
{ for (int i = m.lo; i < m.hi; i++) p[i] = v[i]; }
MT_DW_LANEWISE(f, float, mt_dw_vf, mt_dw_vfu, MT_DW_VWF)
MT_DW_LANEWISE(d, double, mt_dw_vd, mt_dw_vdu, MT_DW_VWD)
#endif

/* The lane masks of a call, (KW + 1) per vector of output columns j (chunk): entry kw selects
   the lanes of image row positions j*VW + lane + kw*DW - PW inside [0, IW) whose output column
   j*VW + lane is one (< OW); entry KW the output columns alone (Y's and dY's row tail). */
#define MT_DW_MASKS(SUFFIX, VW)                                                                 \
static void mt_dw_masks_##SUFFIX(const mt_dw_geom* g, mt_dw_mask_##SUFFIX* masks)               \
{                                                                                               \
    const ptrdiff_t chunks = (g->OW + (VW) - 1) / (VW);                                         \
    for (ptrdiff_t j = 0; j < chunks; j++) {                                                    \
        const ptrdiff_t outs = g->OW - j * (VW) < (VW) ? g->OW - j * (VW) : (VW);               \
        for (ptrdiff_t kw = 0; kw <= g->KW; kw++) {                                             \
            ptrdiff_t lo = 0, hi = outs;                                                        \
            if (kw < g->KW) {                                                                   \
                const ptrdiff_t pos = j * (VW) + kw * g->DW - g->PW;                            \
                lo = pos < 0 ? (-pos < outs ? -pos : outs) : 0;                                 \
                hi = g->IW - pos < outs ? (g->IW - pos > lo ? g->IW - pos : lo) : outs;         \
            }                                                                                   \
            masks[j * (g->KW + 1) + kw] = mt_dw_mask_of_##SUFFIX((int)lo, (int)hi);             \
        }                                                                                       \
    }                                                                                           \
}
MT_DW_MASKS(f, MT_DW_VWF)
MT_DW_MASKS(d, MT_DW_VWD)
static size_t mt_dw_mask_bytes(int is_double)
{ return is_double ? sizeof(mt_dw_mask_d) : sizeof(mt_dw_mask_f); }

/* Output rows per forward block: four independent FMA chains, and each image row loaded once
   for the (up to KH) rows of the block that read it. */
#define MT_DW_ROWS 4

/* acc[r] += the taps of one image plane for block row r (output rows oh0 + r*DH, r < ROWS; one
   vector of columns), the image rows read from plane + (oh0 - PH + t*DH) * IW + col, t < ROWS +
   KH - 1, each row once: row t feeds block row r through kernel row kh = t - r.  `pm`: the
   chunk's lane masks per kw; w: the plane's KH x KW weights.  Inlined with KH and KW constant for
   3x3, so that the loops unroll and the weights stay in registers. */
#define MT_DW_BLOCK(SUFFIX, T, V)                                                               \
static inline __attribute__((always_inline)) void                                               \
mt_dw_block_##SUFFIX(V* acc, const T* plane, ptrdiff_t oh0, ptrdiff_t col,                      \
                     const mt_dw_mask_##SUFFIX* pm, const T* w, ptrdiff_t KH, ptrdiff_t KW,     \
                     ptrdiff_t IH, ptrdiff_t IW, ptrdiff_t DH, ptrdiff_t DW, ptrdiff_t PH)      \
{                                                                                               \
    _Pragma("GCC unroll 8") for (ptrdiff_t t = 0; t < MT_DW_ROWS + KH - 1; t++) {               \
        const ptrdiff_t ih = oh0 - PH + t * DH;                                                 \
        if (ih < 0 || ih >= IH) continue;                                                       \
        const T* row = plane + ih * IW + col;                                                   \
        _Pragma("GCC unroll 4") for (ptrdiff_t kw = 0; kw < KW; kw++) {                         \
            const V xv = mt_dw_mload_##SUFFIX(row + kw * DW, pm[kw]);                           \
            _Pragma("GCC unroll 4") for (int r = 0; r < MT_DW_ROWS; r++)                        \
                if (t - r >= 0 && t - r < KH) acc[r] += w[(t - r) * KW + kw] * xv;              \
        }                                                                                       \
    }                                                                                           \
}

/* One output plane: y = bias + sum over c < C and the taps of w[c][tap] * (image plane c shifted
   by the tap), the C image planes x + c * xstride (C = 1 for Conv, the multiplier for the data
   gradient).  Blocks of MT_DW_ROWS output rows DH apart (the rows that share image rows) times
   one vector of columns. */
#define MT_DW_FORWARD(SUFFIX, T, V, VU, VW)                                                     \
MT_DW_BLOCK(SUFFIX, T, V)                                                                       \
static void mt_dw_forward_plane_##SUFFIX(const mt_dw_geom* g, const mt_dw_mask_##SUFFIX* masks, \
                                         const T* x, ptrdiff_t xstride, const T* w, T bias, T* y) \
{                                                                                               \
    const ptrdiff_t ID = g->ID, IH = g->IH, IW = g->IW, OD = g->OD, OH = g->OH, OW = g->OW;     \
    const ptrdiff_t KD = g->KD, KH = g->KH, KW = g->KW, DD = g->DD, DH = g->DH, DW = g->DW;     \
    const ptrdiff_t PD = g->PD, PH = g->PH, PW = g->PW;                                         \
    const ptrdiff_t chunks = (OW + (VW) - 1) / (VW), taps = KD * KH * KW, ld = KW + 1;          \
    const int three = KH == 3 && KW == 3;                                                       \
    for (ptrdiff_t od = 0; od < OD; od++)                                                       \
        for (ptrdiff_t q = 0; q < DH && q < OH; q++)                                            \
            for (ptrdiff_t oh0 = q; oh0 < OH; oh0 += MT_DW_ROWS * DH)                           \
                for (ptrdiff_t j = 0; j < chunks; j++) {                                        \
                    const mt_dw_mask_##SUFFIX* pm = masks + j * ld;                             \
                    const ptrdiff_t col = j * (VW) - PW;                                        \
                    V acc[MT_DW_ROWS];                                                          \
                    _Pragma("GCC unroll 4") for (int r = 0; r < MT_DW_ROWS; r++)                \
                        acc[r] = (V){0} + bias;                                                 \
                    for (ptrdiff_t c = 0; c < g->C; c++)                                        \
                        for (ptrdiff_t kd = 0; kd < KD; kd++) {                                 \
                            const ptrdiff_t id = od + kd * DD - PD;                             \
                            if (id < 0 || id >= ID) continue;                                   \
                            const T* plane = x + c * xstride + id * IH * IW;                    \
                            const T* wk = w + c * taps + kd * KH * KW;                          \
                            if (three)                                                          \
                                mt_dw_block_##SUFFIX(acc, plane, oh0, col, pm, wk, 3, 3, IH, IW, DH, DW, PH); \
                            else                                                                \
                                mt_dw_block_##SUFFIX(acc, plane, oh0, col, pm, wk, KH, KW, IH, IW, DH, DW, PH); \
                        }                                                                       \
                    _Pragma("GCC unroll 4") for (int r = 0; r < MT_DW_ROWS; r++) {              \
                        const ptrdiff_t oh = oh0 + r * DH;                                      \
                        if (oh >= OH) break;                                                    \
                        T* dst = y + (od * OH + oh) * OW + j * (VW);                            \
                        if (j * (VW) + (VW) <= OW)                                              \
                            *(VU*)dst = acc[r];                                                 \
                        else                                                                    \
                            mt_dw_mstore_##SUFFIX(dst, acc[r], pm[KW]);                         \
                    }                                                                           \
                }                                                                               \
}
MT_DW_FORWARD(f, float, mt_dw_vf, mt_dw_vfu, MT_DW_VWF)
MT_DW_FORWARD(d, double, mt_dw_vd, mt_dw_vdu, MT_DW_VWD)

/* The first and one past the last output position along an axis whose tap (k * dil - pad from
   the output position) stays inside an image axis of `size`, clamped to [0, out). */
static inline void mt_dw_span(ptrdiff_t shift, ptrdiff_t size, ptrdiff_t out, ptrdiff_t* lo, ptrdiff_t* hi)
{
    *lo = shift < 0 ? -shift : 0;
    *hi = size - shift < out ? size - shift : out;
    if (*lo > out) *lo = out;
    if (*hi < *lo) *hi = *lo;
}

/* The weight gradient of one channel over nb samples: out[tap] += sum over the samples and the
   output points o of dy[o] * x[o shifted by the tap] (one image channel per group), the sample
   planes dy + b * dystride and x + b * xstride.
   2D 3x3 kernels: blocks of MT_DW_ROWS rows DH apart times one vector of columns, as in the
   forward pass: the block's dY vectors loaded once, each image row once, the nine taps' lane
   sums in registers.  Other kernels tap by tap: each tap streams the rows of dY and of the
   shifted image that it pairs, two rows and two vectors of columns at a time (four FMA chains). */
#define MT_DW_WEIGHT_GRAD(SUFFIX, T, V, VU, VW)                                                 \
static inline V mt_dw_product_##SUFFIX(const T* drow, const T* xrow, ptrdiff_t j,               \
                                       const mt_dw_mask_##SUFFIX* mj, ptrdiff_t kw, ptrdiff_t KW) \
{ return mt_dw_mload_##SUFFIX(drow + j * (VW), mj[KW]) * mt_dw_mload_##SUFFIX(xrow + j * (VW), mj[kw]); } \
static void mt_dw_weight_grad_3x3_##SUFFIX(const mt_dw_geom* g, const mt_dw_mask_##SUFFIX* masks, \
                                           const T* dy, ptrdiff_t dystride, const T* x,         \
                                           ptrdiff_t xstride, ptrdiff_t nb, T* out)             \
{                                                                                               \
    const ptrdiff_t IH = g->IH, IW = g->IW, OH = g->OH, OW = g->OW, DH = g->DH, DW = g->DW;     \
    const ptrdiff_t PH = g->PH, chunks = (OW + (VW) - 1) / (VW);                                \
    V acc[9];                                                                                   \
    _Pragma("GCC unroll 9") for (int t = 0; t < 9; t++) acc[t] = (V){0};                       \
    for (ptrdiff_t b = 0; b < nb; b++)                                                          \
        for (ptrdiff_t q = 0; q < DH && q < OH; q++)                                            \
            for (ptrdiff_t oh0 = q; oh0 < OH; oh0 += MT_DW_ROWS * DH)                           \
                for (ptrdiff_t j = 0; j < chunks; j++) {                                        \
                    const mt_dw_mask_##SUFFIX* pm = masks + j * 4;                              \
                    V d[MT_DW_ROWS];                                                            \
                    _Pragma("GCC unroll 4") for (int r = 0; r < MT_DW_ROWS; r++) {              \
                        const ptrdiff_t oh = oh0 + r * DH;                                      \
                        d[r] = oh < OH ? mt_dw_mload_##SUFFIX(dy + b * dystride + oh * OW + j * (VW), pm[3]) \
                                       : (V){0};                                                \
                    }                                                                           \
                    const T* plane = x + b * xstride + j * (VW) - g->PW;                        \
                    _Pragma("GCC unroll 8") for (int t = 0; t < MT_DW_ROWS + 2; t++) {          \
                        const ptrdiff_t ih = oh0 - PH + t * DH;                                 \
                        if (ih < 0 || ih >= IH) continue;                                       \
                        _Pragma("GCC unroll 3") for (int kw = 0; kw < 3; kw++) {                \
                            const V xv = mt_dw_mload_##SUFFIX(plane + ih * IW + kw * DW, pm[kw]); \
                            _Pragma("GCC unroll 4") for (int r = 0; r < MT_DW_ROWS; r++)        \
                                if (t - r >= 0 && t - r < 3) acc[(t - r) * 3 + kw] += d[r] * xv; \
                        }                                                                       \
                    }                                                                           \
                }                                                                               \
    _Pragma("GCC unroll 9") for (int t = 0; t < 9; t++) {                                       \
        T sum = 0;                                                                              \
        for (int i = 0; i < (VW); i++) sum += acc[t][i];                                        \
        out[t] += sum;                                                                          \
    }                                                                                           \
}                                                                                               \
static void mt_dw_weight_grad_##SUFFIX(const mt_dw_geom* g, const mt_dw_mask_##SUFFIX* masks,   \
                                       const T* dy, ptrdiff_t dystride, const T* x,             \
                                       ptrdiff_t xstride, ptrdiff_t nb, T* out)                 \
{                                                                                               \
    if (g->ID == 1 && g->OD == 1 && g->KD == 1 && g->KH == 3 && g->KW == 3) {                   \
        mt_dw_weight_grad_3x3_##SUFFIX(g, masks, dy, dystride, x, xstride, nb, out);            \
        return;                                                                                 \
    }                                                                                           \
    const ptrdiff_t chunks = (g->OW + (VW) - 1) / (VW), ld = g->KW + 1, KW = g->KW;             \
    const ptrdiff_t OW = g->OW, IW = g->IW;                                                     \
    for (ptrdiff_t kd = 0; kd < g->KD; kd++)                                                    \
        for (ptrdiff_t kh = 0; kh < g->KH; kh++) {                                              \
            const ptrdiff_t sd = kd * g->DD - g->PD, sh = kh * g->DH - g->PH;                   \
            ptrdiff_t od0, od1, oh0, oh1;                                                       \
            mt_dw_span(sd, g->ID, g->OD, &od0, &od1);                                           \
            mt_dw_span(sh, g->IH, g->OH, &oh0, &oh1);                                           \
            for (ptrdiff_t kw = 0; kw < KW; kw++) {                                             \
                V s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};                                       \
                for (ptrdiff_t b = 0; b < nb; b++)                                              \
                    for (ptrdiff_t od = od0; od < od1; od++) {                                  \
                        const T* d = dy + b * dystride + (od * g->OH + oh0) * OW;               \
                        const T* xr = x + b * xstride + ((od + sd) * g->IH + oh0 + sh) * IW     \
                                      + kw * g->DW - g->PW;                                     \
                        ptrdiff_t oh = oh0, j;                                                  \
                        for (; oh + 1 < oh1; oh += 2, d += 2 * OW, xr += 2 * IW) {              \
                            for (j = 0; j + 1 < chunks; j += 2) {                               \
                                const mt_dw_mask_##SUFFIX* mj = masks + j * ld;                 \
                                s0 += mt_dw_product_##SUFFIX(d, xr, j, mj, kw, KW);             \
                                s1 += mt_dw_product_##SUFFIX(d + OW, xr + IW, j, mj, kw, KW);   \
                                s2 += mt_dw_product_##SUFFIX(d, xr, j + 1, mj + ld, kw, KW);    \
                                s3 += mt_dw_product_##SUFFIX(d + OW, xr + IW, j + 1, mj + ld, kw, KW); \
                            }                                                                   \
                            if (j < chunks) {                                                   \
                                s0 += mt_dw_product_##SUFFIX(d, xr, j, masks + j * ld, kw, KW); \
                                s1 += mt_dw_product_##SUFFIX(d + OW, xr + IW, j, masks + j * ld, kw, KW); \
                            }                                                                   \
                        }                                                                       \
                        if (oh < oh1)                                                           \
                            for (j = 0; j < chunks; j++)                                        \
                                s2 += mt_dw_product_##SUFFIX(d, xr, j, masks + j * ld, kw, KW); \
                    }                                                                           \
                s0 += s1 + s2 + s3;                                                             \
                T sum = 0;                                                                      \
                for (int i = 0; i < (VW); i++) sum += s0[i];                                    \
                out[(kd * g->KH + kh) * KW + kw] += sum;                                        \
            }                                                                                   \
        }                                                                                       \
}
MT_DW_WEIGHT_GRAD(f, float, mt_dw_vf, mt_dw_vfu, MT_DW_VWF)
MT_DW_WEIGHT_GRAD(d, double, mt_dw_vd, mt_dw_vdu, MT_DW_VWD)

static int mt_dw_vbytes(void) { return MT_DW_VBYTES; }

#endif
