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

/* Accumulators of a block: four independent FMA chains, laid out as four output rows times one
   vector of columns (each image row then loaded once for the rows of the block that read it),
   or, for planes less than four rows high (1D), one row times four vectors of columns. */
#define MT_DW_ACC 4

/* The lane masks of a call, (KW + 1) per vector of output columns j (chunk), for the chunks of
   a row and MT_DW_ACC - 1 more (selecting no lane: the missing chunks of a row's last block):
   entry kw selects the lanes of image row positions j*VW + lane + kw*DW - PW inside [0, IW)
   whose output column j*VW + lane is one (< OW); entry KW the output columns alone (Y's and
   dY's row tail). */
static ptrdiff_t mt_dw_mask_count(const mt_dw_geom* g, int is_double)
{
    const ptrdiff_t vw = MT_DW_VBYTES / (is_double ? 8 : 4);
    return ((g->OW + vw - 1) / vw + MT_DW_ACC - 1) * (g->KW + 1);
}
#define MT_DW_MASKS(SUFFIX, VW)                                                                 \
static void mt_dw_masks_##SUFFIX(const mt_dw_geom* g, mt_dw_mask_##SUFFIX* masks)               \
{                                                                                               \
    const ptrdiff_t count = (g->OW + (VW) - 1) / (VW) + MT_DW_ACC - 1;                          \
    for (ptrdiff_t j = 0; j < count; j++) {                                                     \
        ptrdiff_t outs = g->OW - j * (VW) < (VW) ? g->OW - j * (VW) : (VW);                     \
        if (outs < 0) outs = 0;                                                                 \
        for (ptrdiff_t kw = 0; kw <= g->KW; kw++) {                                             \
            ptrdiff_t lo = 0, hi = outs;                                                        \
            if (kw < g->KW) {      /* lanes with 0 <= pos + lane < IW, lane < outs */           \
                const ptrdiff_t pos = j * (VW) + kw * g->DW - g->PW;                            \
                lo = pos < 0 ? -pos : 0;                                                        \
                hi = g->IW - pos < outs ? g->IW - pos : outs;                                   \
                if (lo > outs) lo = outs;                                                       \
                if (hi < lo) hi = lo;                                                           \
            }                                                                                   \
            masks[j * (g->KW + 1) + kw] = mt_dw_mask_of_##SUFFIX((int)lo, (int)hi);             \
        }                                                                                       \
    }                                                                                           \
}
MT_DW_MASKS(f, MT_DW_VWF)
MT_DW_MASKS(d, MT_DW_VWD)
static size_t mt_dw_mask_bytes(int is_double)
{ return is_double ? sizeof(mt_dw_mask_d) : sizeof(mt_dw_mask_f); }

/* Calls body(..., R, CC, KH, KW) with R x CC the block (4 x 1, or 1 x 4 for planes under four
   rows high with several chunks per row) and, for the common kernels (3x3, 5x5, 1D 3 and 5),
   KH and KW as constants: the bodies are inlined, so that their loops unroll and their
   weights or lane sums stay in registers. */
#define MT_DW_DISPATCH(BODY, g, chunks, ...)                                                    \
    do {                                                                                        \
        const int by_rows_ = (g)->OH >= MT_DW_ACC || (chunks) == 1;                             \
        const ptrdiff_t kh_ = (g)->KH, kw_ = (g)->KW;                                           \
        if (kh_ == 3 && kw_ == 3) {                                                             \
            if (by_rows_) BODY(__VA_ARGS__, 4, 1, 3, 3); else BODY(__VA_ARGS__, 1, 4, 3, 3);    \
        } else if (kh_ == 5 && kw_ == 5) {                                                      \
            if (by_rows_) BODY(__VA_ARGS__, 4, 1, 5, 5); else BODY(__VA_ARGS__, 1, 4, 5, 5);    \
        } else if (kh_ == 1 && kw_ == 3) {                                                      \
            if (by_rows_) BODY(__VA_ARGS__, 4, 1, 1, 3); else BODY(__VA_ARGS__, 1, 4, 1, 3);    \
        } else if (kh_ == 1 && kw_ == 5) {                                                      \
            if (by_rows_) BODY(__VA_ARGS__, 4, 1, 1, 5); else BODY(__VA_ARGS__, 1, 4, 1, 5);    \
        } else {                                                                                \
            if (by_rows_) BODY(__VA_ARGS__, 4, 1, kh_, kw_); else BODY(__VA_ARGS__, 1, 4, kh_, kw_); \
        }                                                                                       \
    } while (0)

/* The blocks of one output plane, in order: for each output depth od, the rows in blocks of R
   rows DH apart (the rows that share image rows: oh0 + r*DH, by residue q of oh0 modulo DH),
   and along them CC vectors of columns at a time from chunk j. */
typedef struct { ptrdiff_t od, q, oh0, j; } mt_dw_block;
static inline void mt_dw_next_block(const mt_dw_geom* g, ptrdiff_t chunks, int R, int CC, mt_dw_block* k)
{
    if ((k->j += CC) < chunks) return;
    k->j = 0;
    if ((k->oh0 += R * g->DH) < g->OH) return;
    if (++k->q < g->DH && k->q < g->OH) { k->oh0 = k->q; return; }
    k->q = k->oh0 = 0;
    k->od++;
}

/* The image rows of one block, each loaded once (rows oh0 - PH + t*DH, t < R + KH - 1, from
   `plane`, which points at the block's first column of tap kw = 0): row t meets block row r
   through kernel row kh = t - r.  Forward (wk given): out[r, cc] += wk[kh, kw] * x; weight
   gradient (wk NULL): sums[kh, kw] += d[r, cc] * x. */
#define MT_DW_IMAGE_ROWS(SUFFIX, T, V, VW)                                                      \
static inline __attribute__((always_inline)) void                                               \
mt_dw_image_rows_##SUFFIX(const T* plane, ptrdiff_t oh0, const mt_dw_mask_##SUFFIX* pm,         \
                          const T* wk, V* out, const V* d, V* sums, const int R, const int CC,  \
                          const ptrdiff_t KH, const ptrdiff_t KW, ptrdiff_t IH, ptrdiff_t IW,   \
                          ptrdiff_t DH, ptrdiff_t DW, ptrdiff_t PH)                             \
{                                                                                               \
    _Pragma("GCC unroll 8") for (ptrdiff_t t = 0; t < R + KH - 1; t++) {                        \
        const ptrdiff_t ih = oh0 - PH + t * DH;                                                 \
        if (ih < 0 || ih >= IH) continue;                                                       \
        _Pragma("GCC unroll 4") for (int cc = 0; cc < CC; cc++)                                 \
            _Pragma("GCC unroll 5") for (ptrdiff_t kw = 0; kw < KW; kw++) {                     \
                const V xv = mt_dw_mload_##SUFFIX(plane + ih * IW + cc * (VW) + kw * DW,         \
                                                  pm[cc * (KW + 1) + kw]);                      \
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                           \
                    if (t - r < 0 || t - r >= KH) continue;                                     \
                    if (wk)                                                                     \
                        out[r * CC + cc] += wk[(t - r) * KW + kw] * xv;                         \
                    else                                                                        \
                        sums[(t - r) * KW + kw] += d[r * CC + cc] * xv;                         \
                }                                                                               \
            }                                                                                   \
    }                                                                                           \
}
MT_DW_IMAGE_ROWS(f, float, mt_dw_vf, MT_DW_VWF)
MT_DW_IMAGE_ROWS(d, double, mt_dw_vd, MT_DW_VWD)

/* One output plane: y = bias + sum over c < C and the taps of w[c][tap] * (image plane c shifted
   by the tap), the C image planes x + c * xstride (C = 1 for Conv, the multiplier for the data
   gradient).  Block by block: image row t of a block (oh0 - PH + t*DH) feeds its row r through
   kernel row kh = t - r, so each image row is loaded once per block. */
#define MT_DW_FORWARD(SUFFIX, T, V, VU, VW)                                                     \
static inline __attribute__((always_inline)) void                                               \
mt_dw_forward_body_##SUFFIX(const mt_dw_geom* g, const mt_dw_mask_##SUFFIX* masks, const T* x,  \
                            ptrdiff_t xstride, const T* w, T bias, T* y,                        \
                            const int R, const int CC, const ptrdiff_t KH, const ptrdiff_t KW)  \
{                                                                                               \
    const ptrdiff_t ID = g->ID, IH = g->IH, IW = g->IW, OH = g->OH, OW = g->OW;                 \
    const ptrdiff_t KD = g->KD, DD = g->DD, DH = g->DH, DW = g->DW, PD = g->PD, PH = g->PH;     \
    const ptrdiff_t chunks = (OW + (VW) - 1) / (VW), taps = KD * KH * KW, ld = KW + 1;          \
    for (mt_dw_block k = {0, 0, 0, 0}; k.od < g->OD; mt_dw_next_block(g, chunks, R, CC, &k)) {  \
        const ptrdiff_t od = k.od, oh0 = k.oh0, j = k.j;                                        \
        const mt_dw_mask_##SUFFIX* pm = masks + j * ld;                                         \
        V acc[MT_DW_ACC];                                                                       \
        _Pragma("GCC unroll 4") for (int a = 0; a < MT_DW_ACC; a++) acc[a] = (V){0} + bias;    \
        for (ptrdiff_t c = 0; c < g->C; c++)                                                    \
            for (ptrdiff_t kd = 0; kd < KD; kd++) {                                             \
                const ptrdiff_t id = od + kd * DD - PD;                                         \
                if (id < 0 || id >= ID) continue;                                               \
                const T* plane = x + c * xstride + id * IH * IW + j * (VW) - g->PW;             \
                const T* wk = w + c * taps + kd * KH * KW;                                      \
                mt_dw_image_rows_##SUFFIX(plane, oh0, pm, wk, acc, NULL, NULL, R, CC, KH, KW, IH, IW, DH, DW, PH); \
            }                                                                                   \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                     \
            _Pragma("GCC unroll 4") for (int cc = 0; cc < CC; cc++) {                           \
                const ptrdiff_t oh = oh0 + r * DH;                                              \
                if (oh < OH && j + cc < chunks) {                                               \
                    T* dst = y + (od * OH + oh) * OW + (j + cc) * (VW);                         \
                    if ((j + cc) * (VW) + (VW) <= OW)                                           \
                        *(VU*)dst = acc[r * CC + cc];                                           \
                    else                                                                        \
                        mt_dw_mstore_##SUFFIX(dst, acc[r * CC + cc], pm[cc * ld + KW]);         \
                }                                                                               \
            }                                                                                   \
    }                                                                                           \
}                                                                                               \
static void mt_dw_forward_plane_##SUFFIX(const mt_dw_geom* g, const mt_dw_mask_##SUFFIX* masks, \
                                         const T* x, ptrdiff_t xstride, const T* w, T bias, T* y) \
{                                                                                               \
    MT_DW_DISPATCH(mt_dw_forward_body_##SUFFIX, g, (g->OW + (VW) - 1) / (VW),                   \
                   g, masks, x, xstride, w, bias, y);                                           \
}
MT_DW_FORWARD(f, float, mt_dw_vf, mt_dw_vfu, MT_DW_VWF)
MT_DW_FORWARD(d, double, mt_dw_vd, mt_dw_vdu, MT_DW_VWD)

/* The weight gradient of one channel over nb samples: out[tap] += sum over the samples and the
   output points o of dy[o] * x[o shifted by the tap] (one image channel per group), the sample
   planes dy + b * dystride and x + b * xstride.  Blocks as in the forward pass: the block's dY
   vectors loaded once, each image row once, a kernel depth's KH x KW lane sums in registers
   (the common kernels; with the kernel's sizes unknown at compile time they live in memory). */
#define MT_DW_WEIGHT_GRAD(SUFFIX, T, V, VU, VW)                                                 \
static inline __attribute__((always_inline)) void                                               \
mt_dw_weight_grad_body_##SUFFIX(const mt_dw_geom* g, const mt_dw_mask_##SUFFIX* masks,          \
                                const T* dy, ptrdiff_t dystride, const T* x, ptrdiff_t xstride, \
                                ptrdiff_t nb, T* out, V* lanes,                                 \
                                const int R, const int CC, const ptrdiff_t KH, const ptrdiff_t KW) \
{                                                                                               \
    V sums[25];                 /* in registers when the kernel's sizes are constants */        \
    V* acc = __builtin_constant_p(KH) && __builtin_constant_p(KW) && KH * KW <= 25 ? sums : lanes; \
    const ptrdiff_t ID = g->ID, IH = g->IH, IW = g->IW, OH = g->OH, OW = g->OW;                 \
    const ptrdiff_t DD = g->DD, DH = g->DH, DW = g->DW, PD = g->PD, PH = g->PH;                 \
    const ptrdiff_t chunks = (OW + (VW) - 1) / (VW), ld = KW + 1;                               \
    for (ptrdiff_t kd = 0; kd < g->KD; kd++) {                                                  \
        _Pragma("GCC unroll 25") for (ptrdiff_t t = 0; t < KH * KW; t++) acc[t] = (V){0};       \
        for (ptrdiff_t b = 0; b < nb; b++)                                                      \
            for (mt_dw_block k = {0, 0, 0, 0}; k.od < g->OD; mt_dw_next_block(g, chunks, R, CC, &k)) { \
                const ptrdiff_t od = k.od, oh0 = k.oh0, j = k.j, id = od + kd * DD - PD;        \
                const mt_dw_mask_##SUFFIX* pm = masks + j * ld;                                 \
                if (id < 0 || id >= ID) continue;                                               \
                V d[MT_DW_ACC];                                                                 \
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                             \
                    _Pragma("GCC unroll 4") for (int cc = 0; cc < CC; cc++) {                   \
                        const ptrdiff_t oh = oh0 + r * DH;                                      \
                        d[r * CC + cc] = oh < OH                                                \
                            ? mt_dw_mload_##SUFFIX(dy + b * dystride + (od * OH + oh) * OW + (j + cc) * (VW), \
                                                   pm[cc * ld + KW])                            \
                            : (V){0};                                                           \
                    }                                                                           \
                const T* plane = x + b * xstride + id * IH * IW + j * (VW) - g->PW;             \
                mt_dw_image_rows_##SUFFIX(plane, oh0, pm, NULL, NULL, d, acc, R, CC, KH, KW, IH, IW, DH, DW, PH); \
            }                                                                                   \
        _Pragma("GCC unroll 25") for (ptrdiff_t t = 0; t < KH * KW; t++) {                      \
            T sum = 0;                                                                          \
            for (int i = 0; i < (VW); i++) sum += acc[t][i];                                    \
            out[kd * KH * KW + t] += sum;                                                       \
        }                                                                                       \
    }                                                                                           \
}                                                                                               \
/* `lanes`: KH * KW vectors of scratch for the lane sums of kernels without a constant body. */ \
static void mt_dw_weight_grad_##SUFFIX(const mt_dw_geom* g, const mt_dw_mask_##SUFFIX* masks,   \
                                       const T* dy, ptrdiff_t dystride, const T* x,             \
                                       ptrdiff_t xstride, ptrdiff_t nb, T* out, V* lanes)       \
{                                                                                               \
    MT_DW_DISPATCH(mt_dw_weight_grad_body_##SUFFIX, g, (g->OW + (VW) - 1) / (VW),               \
                   g, masks, dy, dystride, x, xstride, nb, out, lanes);                         \
}
MT_DW_WEIGHT_GRAD(f, float, mt_dw_vf, mt_dw_vfu, MT_DW_VWF)
MT_DW_WEIGHT_GRAD(d, double, mt_dw_vd, mt_dw_vdu, MT_DW_VWD)

static int mt_dw_vbytes(void) { return MT_DW_VBYTES; }

#endif
