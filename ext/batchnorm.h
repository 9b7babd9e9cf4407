/* Batch normalisation over a contiguous (N, C, D) buffer (ext/batchnorm.pyx): a call handles
   the channels [c0, c1), statistics, coefficients and the elementwise pass together, so the
   channels' planes are still in cache for the second pass.  Float (suffix _f) and double (_d)
   from one macro.

   Planes of at least MT_BN_LANES elements go one channel at a time, vectorised along the
   plane: sums run in double over MT_BN_LANES accumulators (four vectors of eight doubles, which
   GCC maps onto the target's registers: one AVX-512 register each, two AVX or four SSE ones),
   the elements of a plane dealt to them in turn, the tail of each plane that fills no whole set
   of lanes going to one scalar accumulator, all added up in a fixed order at the end.  Smaller
   planes go a block of channels at a time, vectorised across the block's row (up to
   MT_BN_BLOCK elements of N rows of C * D): the rows are added up elementwise, in order, into
   a double row, which each channel then sums along its D entries.  Either way the order of
   every sum is fixed by the shape alone: results depend neither on the thread count, nor on
   where the buffers sit, nor on the ISA level a build targets.  Elementwise passes compute in
   the element type. */
#ifndef MINITRAIN_BATCHNORM_H
#define MINITRAIN_BATCHNORM_H
#include <math.h>
#include <stddef.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define MT_BN_LANES 32
#define MT_BN_BLOCK 512
/* The activations whose gradient mt_bn_backward can apply to its dy first. */
enum { MT_BN_ACT_NONE = 0, MT_BN_ACT_RELU = 1, MT_BN_ACT_HARD_SWISH = 2, MT_BN_ACT_CLIP = 3 };
typedef double mt_bn_vd __attribute__((vector_size(64)));
typedef float mt_bn_vf __attribute__((vector_size(32)));

/* Eight elements from any address, as doubles (AVX-512 converts them in one instruction, which
   GCC's generic conversion splits in two).  Macros, not functions: a function returning a
   64-byte vector has a different ABI with and without AVX-512, which GCC warns about. */
#if defined(__AVX512F__)
#define MT_BN_LOAD_f(p) ((mt_bn_vd)_mm512_cvtps_pd(_mm256_loadu_ps(p)))
#else
#define MT_BN_LOAD_f(p) ({ mt_bn_vf v_; memcpy(&v_, (p), sizeof v_); __builtin_convertvector(v_, mt_bn_vd); })
#endif
#define MT_BN_LOAD_d(p) ({ mt_bn_vd v_; memcpy(&v_, (p), sizeof v_); v_; })

/* The lanes of four accumulators and a tail, added in a fixed order. */
static inline double mt_bn_total(const mt_bn_vd* acc, double tail)
{
    mt_bn_vd v = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    return (((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]))) + tail;
}

/* Channels per unit of work (a call's c1 - c0, the last unit excepted): one channel with
   planes of MT_BN_LANES elements or more, else a block. */
static inline ptrdiff_t mt_bn_unit_channels(ptrdiff_t d)
{ return d >= MT_BN_LANES ? 1 : MT_BN_BLOCK / (d > 0 ? d : 1); }

/* Sum over the d entries of each of the cb channels of a block row. */
static inline void mt_bn_channel_totals(const double* row, ptrdiff_t cb, ptrdiff_t d, double* out)
{
    for (ptrdiff_t ch = 0; ch < cb; ch++) {
        double s = 0;
        for (ptrdiff_t t = 0; t < d; t++)
            s += row[ch * d + t];
        out[ch] = s;
    }
}

/* out[k] = v[k / d] for k < cb * d: per-channel values spread along a block row. */
static inline void mt_bn_spread(const double* v, ptrdiff_t cb, ptrdiff_t d, double* out)
{
    for (ptrdiff_t ch = 0; ch < cb; ch++)
        for (ptrdiff_t t = 0; t < d; t++)
            out[ch * d + t] = v[ch];
}

#define MT_BN_KERNELS(SUFFIX, T)                                                                \
/* Sums over one channel's n planes of d >= MT_BN_LANES elements (plane i at x + i * stride):   \
   of x (shift = 0, square = 0) or of (x - shift)^2 (square = 1). */                            \
static double mt_bn_plane_sum_##SUFFIX(const T* x, ptrdiff_t n, ptrdiff_t stride, ptrdiff_t d,  \
                                       double shift, int square)                                \
{                                                                                               \
    const ptrdiff_t body = d - d % MT_BN_LANES;                                                 \
    mt_bn_vd acc[4] = {{0}, {0}, {0}, {0}};                                                     \
    double tail = 0;                                                                            \
    for (ptrdiff_t i = 0; i < n; i++) {                                                         \
        const T* p = x + i * stride;                                                            \
        for (ptrdiff_t j = 0; j < body; j += MT_BN_LANES)                                       \
            for (int a = 0; a < 4; a++) {                                                       \
                mt_bn_vd v = MT_BN_LOAD_##SUFFIX(p + j + 8 * a) - shift;                        \
                acc[a] += square ? v * v : v;                                                   \
            }                                                                                   \
        for (ptrdiff_t j = body; j < d; j++) {                                                  \
            double e = p[j] - shift;                                                            \
            tail += square ? e * e : e;                                                         \
        }                                                                                       \
    }                                                                                           \
    return mt_bn_total(acc, tail);                                                              \
}                                                                                               \
                                                                                                \
/* sum(dy) and sum(dy * (x - mean)) over one channel's planes of d >= MT_BN_LANES elements      \
   (plane i of dy at dy + i * dy_stride, of x at x + i * stride). */                            \
static void mt_bn_plane_grad_sums_##SUFFIX(const T* dy, ptrdiff_t dy_stride, const T* x,        \
                                           ptrdiff_t n, ptrdiff_t stride, ptrdiff_t d,          \
                                           double mean, double* sum_dy,                         \
                                           double* sum_dy_centered)                             \
{                                                                                               \
    const ptrdiff_t body = d - d % MT_BN_LANES;                                                 \
    mt_bn_vd acc_g[4] = {{0}, {0}, {0}, {0}}, acc_c[4] = {{0}, {0}, {0}, {0}};                  \
    double tail_g = 0, tail_c = 0;                                                              \
    for (ptrdiff_t i = 0; i < n; i++) {                                                         \
        const T* g = dy + i * dy_stride;                                                        \
        const T* p = x + i * stride;                                                            \
        for (ptrdiff_t j = 0; j < body; j += MT_BN_LANES)                                       \
            for (int a = 0; a < 4; a++) {                                                       \
                mt_bn_vd v = MT_BN_LOAD_##SUFFIX(g + j + 8 * a);                                \
                acc_g[a] += v;                                                                  \
                acc_c[a] += v * (MT_BN_LOAD_##SUFFIX(p + j + 8 * a) - mean);                    \
            }                                                                                   \
        for (ptrdiff_t j = body; j < d; j++) {                                                  \
            tail_g += g[j];                                                                     \
            tail_c += g[j] * (p[j] - mean);                                                     \
        }                                                                                       \
    }                                                                                           \
    *sum_dy = mt_bn_total(acc_g, tail_g);                                                       \
    *sum_dy_centered = mt_bn_total(acc_c, tail_c);                                              \
}                                                                                               \
                                                                                                \
/* Block sums (d < MT_BN_LANES): row_sum[k] = sum over the n rows of x (shift = NULL) or of     \
   (x - shift[k])^2, for the L elements of a block row (row i at x + i * stride). */            \
static void mt_bn_row_sum_##SUFFIX(const T* x, ptrdiff_t n, ptrdiff_t stride, ptrdiff_t L,      \
                                   const double* shift, double* row_sum)                        \
{                                                                                               \
    for (ptrdiff_t k = 0; k < L; k++)                                                           \
        row_sum[k] = 0;                                                                         \
    for (ptrdiff_t i = 0; i < n; i++) {                                                         \
        const T* p = x + i * stride;                                                            \
        if (shift)                                                                              \
            for (ptrdiff_t k = 0; k < L; k++) {                                                 \
                double e = p[k] - shift[k];                                                     \
                row_sum[k] += e * e;                                                            \
            }                                                                                   \
        else                                                                                    \
            for (ptrdiff_t k = 0; k < L; k++)                                                   \
                row_sum[k] += p[k];                                                             \
    }                                                                                           \
}                                                                                               \
                                                                                                \
/* The mean and biased variance of channels [0, cb) (x at the first one's first plane). */      \
static void mt_bn_moments_##SUFFIX(const T* x, ptrdiff_t n, ptrdiff_t stride, ptrdiff_t d,      \
                                   ptrdiff_t cb, double* mean, double* var)                     \
{                                                                                               \
    const double count = (double)(n * d);                                                       \
    if (d >= MT_BN_LANES) {                                                                     \
        for (ptrdiff_t ch = 0; ch < cb; ch++) {                                                 \
            mean[ch] = mt_bn_plane_sum_##SUFFIX(x + ch * d, n, stride, d, 0, 0) / count;        \
            var[ch] = mt_bn_plane_sum_##SUFFIX(x + ch * d, n, stride, d, mean[ch], 1) / count;  \
        }                                                                                       \
        return;                                                                                 \
    }                                                                                           \
    double row[MT_BN_BLOCK], shift[MT_BN_BLOCK];                                                \
    mt_bn_row_sum_##SUFFIX(x, n, stride, cb * d, NULL, row);                                    \
    mt_bn_channel_totals(row, cb, d, mean);                                                     \
    for (ptrdiff_t ch = 0; ch < cb; ch++)                                                       \
        mean[ch] /= count;                                                                      \
    mt_bn_spread(mean, cb, d, shift);                                                           \
    mt_bn_row_sum_##SUFFIX(x, n, stride, cb * d, shift, row);                                   \
    mt_bn_channel_totals(row, cb, d, var);                                                      \
    for (ptrdiff_t ch = 0; ch < cb; ch++)                                                       \
        var[ch] /= count;                                                                       \
}                                                                                               \
                                                                                                \
/* sum(dy) and sum(dy * (x - mean)) of channels [0, cb) (dy's rows dy_stride apart). */          \
static void mt_bn_grad_sums_##SUFFIX(const T* dy, ptrdiff_t dy_stride, const T* x, ptrdiff_t n, \
                                     ptrdiff_t stride, ptrdiff_t d, ptrdiff_t cb,               \
                                     const T* mean, double* sum_dy, double* sum_dy_centered)    \
{                                                                                               \
    if (d >= MT_BN_LANES) {                                                                     \
        for (ptrdiff_t ch = 0; ch < cb; ch++)                                                   \
            mt_bn_plane_grad_sums_##SUFFIX(dy + ch * d, dy_stride, x + ch * d, n, stride, d,    \
                                           mean[ch], &sum_dy[ch], &sum_dy_centered[ch]);        \
        return;                                                                                 \
    }                                                                                           \
    const ptrdiff_t L = cb * d;                                                                 \
    double means[MT_BN_BLOCK], shift[MT_BN_BLOCK], row_g[MT_BN_BLOCK], row_c[MT_BN_BLOCK];      \
    for (ptrdiff_t ch = 0; ch < cb; ch++)                                                       \
        means[ch] = mean[ch];                                                                   \
    mt_bn_spread(means, cb, d, shift);                                                          \
    for (ptrdiff_t k = 0; k < L; k++)                                                           \
        row_g[k] = row_c[k] = 0;                                                                \
    for (ptrdiff_t i = 0; i < n; i++) {                                                         \
        const T* g = dy + i * dy_stride;                                                        \
        const T* p = x + i * stride;                                                            \
        for (ptrdiff_t k = 0; k < L; k++) {                                                     \
            row_g[k] += g[k];                                                                   \
            row_c[k] += g[k] * (p[k] - shift[k]);                                               \
        }                                                                                       \
    }                                                                                           \
    mt_bn_channel_totals(row_g, cb, d, sum_dy);                                                 \
    mt_bn_channel_totals(row_c, cb, d, sum_dy_centered);                                        \
}                                                                                               \
                                                                                                \
/* y = x * mul[ch] + add[ch] over channels [0, cb): along each plane, or along the block row    \
   with the coefficients spread over it. */                                                     \
static void mt_bn_affine_##SUFFIX(const T* x, T* y, ptrdiff_t n, ptrdiff_t stride, ptrdiff_t d, \
                                  ptrdiff_t cb, const T* mul, const T* add)                     \
{                                                                                               \
    if (d >= MT_BN_LANES) {                                                                     \
        for (ptrdiff_t i = 0; i < n; i++)                                                       \
            for (ptrdiff_t ch = 0; ch < cb; ch++) {                                             \
                const T* restrict p = x + i * stride + ch * d;                                  \
                T* restrict q = y + i * stride + ch * d;                                        \
                const T a = mul[ch], b = add[ch];                                               \
                for (ptrdiff_t t = 0; t < d; t++)                                               \
                    q[t] = p[t] * a + b;                                                        \
            }                                                                                   \
        return;                                                                                 \
    }                                                                                           \
    const ptrdiff_t L = cb * d;                                                                 \
    T a[MT_BN_BLOCK], b[MT_BN_BLOCK];                                                           \
    for (ptrdiff_t ch = 0; ch < cb; ch++)                                                       \
        for (ptrdiff_t t = 0; t < d; t++) {                                                     \
            a[ch * d + t] = mul[ch];                                                            \
            b[ch * d + t] = add[ch];                                                            \
        }                                                                                       \
    for (ptrdiff_t i = 0; i < n; i++) {                                                         \
        const T* restrict p = x + i * stride;                                                   \
        T* restrict q = y + i * stride;                                                         \
        for (ptrdiff_t k = 0; k < L; k++)                                                       \
            q[k] = p[k] * a[k] + b[k];                                                          \
    }                                                                                           \
}                                                                                               \
                                                                                                \
/* dx = k_dy[ch] * dy + k_x[ch] * (x - mean[ch]) + k_0[ch] over channels [0, cb), as             \
   mt_bn_affine goes (dy's rows dy_stride apart). */                                            \
static void mt_bn_grad_input_##SUFFIX(const T* dy, ptrdiff_t dy_stride, const T* x, T* dx,      \
                                      ptrdiff_t n, ptrdiff_t stride, ptrdiff_t d, ptrdiff_t cb, \
                                      const T* mean, const T* k_dy, const T* k_x, const T* k_0) \
{                                                                                               \
    if (d >= MT_BN_LANES) {                                                                     \
        for (ptrdiff_t i = 0; i < n; i++)                                                       \
            for (ptrdiff_t ch = 0; ch < cb; ch++) {                                             \
                const ptrdiff_t at = i * stride + ch * d;                                       \
                const T* restrict g = dy + i * dy_stride + ch * d;                              \
                const T* restrict p = x + at;                                                   \
                T* restrict q = dx + at;                                                        \
                const T a = k_dy[ch], b = k_x[ch], e = k_0[ch], m = mean[ch];                   \
                for (ptrdiff_t t = 0; t < d; t++)                                               \
                    q[t] = a * g[t] + b * (p[t] - m) + e;                                       \
            }                                                                                   \
        return;                                                                                 \
    }                                                                                           \
    const ptrdiff_t L = cb * d;                                                                 \
    T a[MT_BN_BLOCK], b[MT_BN_BLOCK], e[MT_BN_BLOCK], m[MT_BN_BLOCK];                           \
    for (ptrdiff_t ch = 0; ch < cb; ch++)                                                       \
        for (ptrdiff_t t = 0; t < d; t++) {                                                     \
            a[ch * d + t] = k_dy[ch];                                                           \
            b[ch * d + t] = k_x[ch];                                                            \
            e[ch * d + t] = k_0[ch];                                                            \
            m[ch * d + t] = mean[ch];                                                           \
        }                                                                                       \
    for (ptrdiff_t i = 0; i < n; i++) {                                                         \
        const T* restrict g = dy + i * dy_stride;                                               \
        const T* restrict p = x + i * stride;                                                   \
        T* restrict q = dx + i * stride;                                                        \
        for (ptrdiff_t k = 0; k < L; k++)                                                       \
            q[k] = a[k] * g[k] + b[k] * (p[k] - m[k]) + e[k];                                   \
    }                                                                                           \
}                                                                                               \
                                                                                                \
/* BatchNormalization on channels [c0, c1) of (n, c, d): batch statistics and the running       \
   averages momentum * input + (1 - momentum) * batch when training, input_mean and input_var    \
   otherwise; saved_mean and saved_inv_std get the mean and 1 / sqrt(var + epsilon) used. */     \
static void mt_bn_forward_##SUFFIX(const T* x, T* y, ptrdiff_t n, ptrdiff_t c, ptrdiff_t d,     \
                                   ptrdiff_t c0, ptrdiff_t c1, const T* scale, const T* bias,   \
                                   const T* input_mean, const T* input_var, double epsilon,     \
                                   double momentum, int training, T* saved_mean,                \
                                   T* saved_inv_std, T* running_mean, T* running_var)           \
{                                                                                               \
    double mean[MT_BN_BLOCK], var[MT_BN_BLOCK];                                                 \
    T mul[MT_BN_BLOCK], add[MT_BN_BLOCK];                                                       \
    const ptrdiff_t unit = mt_bn_unit_channels(d);                                              \
    for (ptrdiff_t b0 = c0; b0 < c1; b0 += unit) {                                              \
        const ptrdiff_t cb = c1 - b0 < unit ? c1 - b0 : unit;                                   \
        if (training)                                                                           \
            mt_bn_moments_##SUFFIX(x + b0 * d, n, c * d, d, cb, mean, var);                     \
        for (ptrdiff_t k = 0; k < cb; k++) {                                                    \
            const ptrdiff_t ch = b0 + k;                                                        \
            if (training) {                                                                     \
                running_mean[ch] = (T)(momentum * input_mean[ch] + (1 - momentum) * mean[k]);   \
                running_var[ch] = (T)(momentum * input_var[ch] + (1 - momentum) * var[k]);      \
            } else {                                                                            \
                mean[k] = input_mean[ch];                                                       \
                var[k] = input_var[ch];                                                         \
            }                                                                                   \
            const double inv_std = 1 / sqrt(var[k] + epsilon), m = scale[ch] * inv_std;         \
            saved_mean[ch] = (T)mean[k];                                                        \
            saved_inv_std[ch] = (T)inv_std;                                                     \
            mul[k] = (T)m;                                                                      \
            add[k] = (T)(bias[ch] - mean[k] * m);                                               \
        }                                                                                       \
        mt_bn_affine_##SUFFIX(x + b0 * d, y + b0 * d, n, c * d, d, cb, mul, add);               \
    }                                                                                           \
}                                                                                               \
                                                                                                \
/* The gradient of an activation for the L elements of each of n rows (row i of dz and a at      \
   i * stride) into the rows of g (L apart): ReluGrad's dz where a > 0, else 0; HardSwishGrad's  \
   0 below -3, dz (a / 3 + 1/2) up to 3 included, dz above and where a is NaN; ClipGrad's 0     \
   outside [low, high], dz inside and where a is NaN (rounded as ext/activation.pyx and         \
   ext/pointwise_activation.pyx compute them: a / 3 + 1/2 in double). */                        \
static void mt_bn_activation_grad_##SUFFIX(const T* dz, const T* a, ptrdiff_t n,                \
                                           ptrdiff_t stride, ptrdiff_t L, int act, T low,       \
                                           T high, T* g)                                        \
{                                                                                               \
    for (ptrdiff_t i = 0; i < n; i++) {                                                         \
        const T* restrict z = dz + i * stride;                                                  \
        const T* restrict v = a + i * stride;                                                   \
        T* restrict q = g + i * L;                                                              \
        if (act == MT_BN_ACT_RELU)                                                              \
            for (ptrdiff_t k = 0; k < L; k++)                                                   \
                q[k] = v[k] > 0 ? z[k] : 0;                                                     \
        else if (act == MT_BN_ACT_CLIP)                                                         \
            for (ptrdiff_t k = 0; k < L; k++)                                                   \
                q[k] = (v[k] < low) | (v[k] > high) ? 0 : z[k];                                 \
        else                                                                                    \
            for (ptrdiff_t k = 0; k < L; k++) {                                                 \
                const T t = z[k] * (v[k] <= 3 ? (T)(v[k] / 3.0 + 0.5) : (T)1);                  \
                q[k] = v[k] < -3 ? 0 : t;                                                       \
            }                                                                                   \
    }                                                                                           \
}                                                                                               \
                                                                                                \
/* BatchNormalizationGrad on channels [c0, c1): dbias = sum(dy), dscale = sum(dy * (x - mean))  \
   * inv_std when dscale is not NULL; when dx is not NULL, dx = scale * inv_std * dy, less in    \
   training the paths through the batch statistics,                                             \
   scale * inv_std * (inv_std^2 * (x - mean) * sum(dy * (x - mean)) + sum(dy)) / count.         \
   With act other than MT_BN_ACT_NONE, dy is the gradient of an activation's output and a its   \
   input (Clip's bounds low and high): the activation's gradient is BatchNormalizationGrad's    \
   dY, made a unit of channels at a time into `scratch` (n * unit channels * d elements), where \
   both passes read it. */                                                                      \
static void mt_bn_backward_##SUFFIX(const T* dy, const T* a, int act, T low, T high,            \
                                    T* scratch, const T* x,                                     \
                                    T* dx, ptrdiff_t n, ptrdiff_t c, ptrdiff_t d, ptrdiff_t c0, \
                                    ptrdiff_t c1, const T* scale, const T* mean,                \
                                    const T* inv_std, int training, T* dscale, T* dbias)        \
{                                                                                               \
    double sum_dy[MT_BN_BLOCK], sum_dy_centered[MT_BN_BLOCK];                                   \
    T k_dy[MT_BN_BLOCK], k_x[MT_BN_BLOCK], k_0[MT_BN_BLOCK];                                    \
    const ptrdiff_t unit = mt_bn_unit_channels(d);                                              \
    const double count = (double)(n * d);                                                       \
    for (ptrdiff_t b0 = c0; b0 < c1; b0 += unit) {                                              \
        const ptrdiff_t cb = c1 - b0 < unit ? c1 - b0 : unit;                                   \
        const T* g = dy + b0 * d;                                                               \
        ptrdiff_t g_stride = c * d;                                                             \
        if (act != MT_BN_ACT_NONE) {                                                            \
            mt_bn_activation_grad_##SUFFIX(dy + b0 * d, a + b0 * d, n, c * d, cb * d, act, low, \
                                           high, scratch);                                      \
            g = scratch;                                                                        \
            g_stride = cb * d;                                                                  \
        }                                                                                       \
        if (training || dscale)                                                                 \
            mt_bn_grad_sums_##SUFFIX(g, g_stride, x + b0 * d, n, c * d, d, cb, mean + b0,       \
                                     sum_dy, sum_dy_centered);                                  \
        for (ptrdiff_t k = 0; k < cb; k++) {                                                    \
            const ptrdiff_t ch = b0 + k;                                                        \
            const double s = inv_std[ch], a = scale[ch] * s;                                    \
            if (dscale) {                                                                       \
                dbias[ch] = (T)sum_dy[k];                                                       \
                dscale[ch] = (T)(sum_dy_centered[k] * s);                                       \
            }                                                                                   \
            k_dy[k] = (T)a;                                                                     \
            k_x[k] = training ? (T)(-a * s * s * sum_dy_centered[k] / count) : 0;               \
            k_0[k] = training ? (T)(-a * sum_dy[k] / count) : 0;                                \
        }                                                                                       \
        if (dx)                                                                                 \
            mt_bn_grad_input_##SUFFIX(g, g_stride, x + b0 * d, dx + b0 * d, n, c * d, d, cb,    \
                                      mean + b0, k_dy, k_x, k_0);                               \
    }                                                                                           \
}

MT_BN_KERNELS(f, float)
MT_BN_KERNELS(d, double)

#endif
