/* LayerNormalization and its gradient over short rows of a fixed width C (one scale and bias
   per column), the channel-last normalisation of a few channels (ext/sample_normalization.pyx).
   Rows go in blocks of MT_LN_SHORT_BLOCK, every loop of a block runs across its rows with C a
   compile-time constant, so the compiler vectorizes across rows instead of along one row of a
   few elements.  Row statistics accumulate in the data's type: a row holds at most 64
   elements, and its deviations are summed after its mean is taken (two passes).  The gradient's
   dscale and dbias terms are summed elementwise over the block's shape, in the data's type, and
   go to double accumulators every MT_LN_SHORT_FLUSH blocks. */
#ifndef MINITRAIN_LAYER_NORM_SHORT_H
#define MINITRAIN_LAYER_NORM_SHORT_H
#include <math.h>
#include <stddef.h>

#define MT_LN_SHORT_BLOCK 16
#define MT_LN_SHORT_FLUSH 16

/* NAME_forward(x, scale, bias, y, mean, inv_std, rows, epsilon) over `rows` rows of C elements
   (bias may be NULL), and NAME_backward(dy, x, scale, mean, inv_std, dx, dscale, dbias, rows):
   dx (NULL: not computed) and the dscale, dbias sums added into the double accumulators (both
   NULL: not computed).  SQRT is the square root of T. */
#define MT_LAYER_NORM_SHORT(NAME, T, C, SQRT)                                                       \
static inline __attribute__((always_inline)) void NAME##_forward_block(                           \
        const T* __restrict x, const T* __restrict scale, const T* __restrict bias,                \
        T* __restrict y, T* __restrict mean, T* __restrict inv_std, ptrdiff_t n, T epsilon) {      \
    T m[MT_LN_SHORT_BLOCK], inv[MT_LN_SHORT_BLOCK];                                                \
    for (ptrdiff_t j = 0; j < n; j++) {                                                            \
        T total = 0;                                                                               \
        for (ptrdiff_t c = 0; c < C; c++) total += x[j * C + c];                                   \
        m[j] = total / C;                                                                          \
    }                                                                                              \
    for (ptrdiff_t j = 0; j < n; j++) {                                                            \
        T squares = 0;                                                                             \
        for (ptrdiff_t c = 0; c < C; c++) {                                                        \
            const T d = x[j * C + c] - m[j];                                                       \
            squares += d * d;                                                                      \
        }                                                                                          \
        inv[j] = (T)1 / SQRT(squares / C + epsilon);                                               \
        mean[j] = m[j];                                                                            \
        inv_std[j] = inv[j];                                                                       \
    }                                                                                              \
    for (ptrdiff_t j = 0; j < n; j++)                                                              \
        for (ptrdiff_t c = 0; c < C; c++)                                                          \
            y[j * C + c] = (x[j * C + c] - m[j]) * inv[j] * scale[c] + bias[c];                    \
}                                                                                                  \
                                                                                                   \
static void NAME##_forward(const T* __restrict x, const T* __restrict scale, const T* bias,         \
                           T* __restrict y, T* __restrict mean, T* __restrict inv_std,             \
                           ptrdiff_t rows, double epsilon) {                                       \
    T zeros[C];                                                                                    \
    ptrdiff_t r = 0;                                                                               \
    if (bias == NULL) {                                                                            \
        for (ptrdiff_t c = 0; c < C; c++) zeros[c] = 0;                                            \
        bias = zeros;                                                                              \
    }                                                                                              \
    for (; r + MT_LN_SHORT_BLOCK <= rows; r += MT_LN_SHORT_BLOCK)                                  \
        NAME##_forward_block(x + r * C, scale, bias, y + r * C, mean + r, inv_std + r,             \
                             MT_LN_SHORT_BLOCK, (T)epsilon);                                       \
    if (r < rows)                                                                                  \
        NAME##_forward_block(x + r * C, scale, bias, y + r * C, mean + r, inv_std + r, rows - r,   \
                             (T)epsilon);                                                          \
}                                                                                                  \
                                                                                                   \
/* A block's dX (when dx is not NULL) and its dscale, dbias terms added elementwise into the   \
   block-shaped partial sums sd, sb (when not NULL): independent sums, no chain per column.     \
   dX = inv * (g - mean(g) - n * mean(g * n)), g = dY * scale, n = (X - mean) * inv */           \
static inline __attribute__((always_inline)) void NAME##_backward_block(                          \
        const T* __restrict dy, const T* __restrict x, const T* __restrict scale,                  \
        const T* __restrict mean, const T* __restrict inv_std, T* __restrict dx,                   \
        T* __restrict sd, T* __restrict sb, ptrdiff_t n) {                                         \
    T norm[MT_LN_SHORT_BLOCK * C], mg[MT_LN_SHORT_BLOCK], mgn[MT_LN_SHORT_BLOCK];                  \
    for (ptrdiff_t j = 0; j < n; j++)                                                              \
        for (ptrdiff_t c = 0; c < C; c++)                                                          \
            norm[j * C + c] = (x[j * C + c] - mean[j]) * inv_std[j];                               \
    if (sd != NULL)                                                                                \
        for (ptrdiff_t k = 0; k < n * C; k++) {                                                    \
            sd[k] += dy[k] * norm[k];                                                              \
            sb[k] += dy[k];                                                                        \
        }                                                                                          \
    if (dx == NULL) return;                                                                        \
    for (ptrdiff_t j = 0; j < n; j++) {                                                            \
        T sum_g = 0, sum_gn = 0;                                                                   \
        for (ptrdiff_t c = 0; c < C; c++) {                                                        \
            const T g = dy[j * C + c] * scale[c];                                                  \
            sum_g += g;                                                                            \
            sum_gn += g * norm[j * C + c];                                                         \
        }                                                                                          \
        mg[j] = sum_g / C;                                                                         \
        mgn[j] = sum_gn / C;                                                                       \
    }                                                                                              \
    for (ptrdiff_t j = 0; j < n; j++)                                                              \
        for (ptrdiff_t c = 0; c < C; c++)                                                          \
            dx[j * C + c] = inv_std[j] * (dy[j * C + c] * scale[c] - mg[j]                         \
                                          - norm[j * C + c] * mgn[j]);                             \
}                                                                                                  \
                                                                                                   \
/* The partial sums sd, sb of a block's shape folded into the double accumulators, and zeroed. */ \
static inline void NAME##_flush(T* __restrict sd, T* __restrict sb, double* __restrict dscale,     \
                                double* __restrict dbias) {                                        \
    for (ptrdiff_t j = 0; j < MT_LN_SHORT_BLOCK; j++)                                              \
        for (ptrdiff_t c = 0; c < C; c++) {                                                        \
            dscale[c] += sd[j * C + c];                                                            \
            dbias[c] += sb[j * C + c];                                                             \
            sd[j * C + c] = sb[j * C + c] = 0;                                                     \
        }                                                                                          \
}                                                                                                  \
                                                                                                   \
static void NAME##_backward(const T* __restrict dy, const T* __restrict x,                         \
                            const T* __restrict scale, const T* __restrict mean,                   \
                            const T* __restrict inv_std, T* __restrict dx,                         \
                            double* __restrict dscale, double* __restrict dbias, ptrdiff_t rows) { \
    T sd[MT_LN_SHORT_BLOCK * C], sb[MT_LN_SHORT_BLOCK * C];                                        \
    T* sums = dscale == NULL ? NULL : sd;                                                          \
    ptrdiff_t r = 0, blocks = 0;                                                                   \
    for (ptrdiff_t k = 0; k < MT_LN_SHORT_BLOCK * C; k++) sd[k] = sb[k] = 0;                       \
    for (; r + MT_LN_SHORT_BLOCK <= rows; r += MT_LN_SHORT_BLOCK) {                                \
        NAME##_backward_block(dy + r * C, x + r * C, scale, mean + r, inv_std + r,                 \
                              dx == NULL ? NULL : dx + r * C, sums, sb, MT_LN_SHORT_BLOCK);        \
        if (sums != NULL && ++blocks % MT_LN_SHORT_FLUSH == 0)                                     \
            NAME##_flush(sd, sb, dscale, dbias);                                                   \
    }                                                                                              \
    if (r < rows)                                                                                  \
        NAME##_backward_block(dy + r * C, x + r * C, scale, mean + r, inv_std + r,                 \
                              dx == NULL ? NULL : dx + r * C, sums, sb, rows - r);                 \
    if (sums != NULL)                                                                              \
        NAME##_flush(sd, sb, dscale, dbias);                                                       \
}

#define MT_LAYER_NORM_SHORT_WIDTHS(PREFIX, T, SQRT)                                                 \
    MT_LAYER_NORM_SHORT(PREFIX##4, T, 4, SQRT)                                                     \
    MT_LAYER_NORM_SHORT(PREFIX##8, T, 8, SQRT)                                                     \
    MT_LAYER_NORM_SHORT(PREFIX##16, T, 16, SQRT)                                                   \
    MT_LAYER_NORM_SHORT(PREFIX##32, T, 32, SQRT)                                                   \
    MT_LAYER_NORM_SHORT(PREFIX##64, T, 64, SQRT)                                                   \
/* The forward and backward of `cols`-element rows; 0 (nothing done) for a width without one. */  \
static int PREFIX##_forward(const T* x, const T* scale, const T* bias, T* y, T* mean, T* inv_std,  \
                            ptrdiff_t rows, ptrdiff_t cols, double epsilon) {                      \
    switch (cols) {                                                                                \
    case 4: PREFIX##4_forward(x, scale, bias, y, mean, inv_std, rows, epsilon); return 1;          \
    case 8: PREFIX##8_forward(x, scale, bias, y, mean, inv_std, rows, epsilon); return 1;          \
    case 16: PREFIX##16_forward(x, scale, bias, y, mean, inv_std, rows, epsilon); return 1;        \
    case 32: PREFIX##32_forward(x, scale, bias, y, mean, inv_std, rows, epsilon); return 1;        \
    case 64: PREFIX##64_forward(x, scale, bias, y, mean, inv_std, rows, epsilon); return 1;        \
    }                                                                                              \
    return 0;                                                                                      \
}                                                                                                  \
static int PREFIX##_backward(const T* dy, const T* x, const T* scale, const T* mean,               \
                             const T* inv_std, T* dx, double* dscale, double* dbias,               \
                             ptrdiff_t rows, ptrdiff_t cols) {                                     \
    switch (cols) {                                                                                \
    case 4: PREFIX##4_backward(dy, x, scale, mean, inv_std, dx, dscale, dbias, rows); return 1;    \
    case 8: PREFIX##8_backward(dy, x, scale, mean, inv_std, dx, dscale, dbias, rows); return 1;    \
    case 16: PREFIX##16_backward(dy, x, scale, mean, inv_std, dx, dscale, dbias, rows); return 1;  \
    case 32: PREFIX##32_backward(dy, x, scale, mean, inv_std, dx, dscale, dbias, rows); return 1;  \
    case 64: PREFIX##64_backward(dy, x, scale, mean, inv_std, dx, dscale, dbias, rows); return 1;  \
    }                                                                                              \
    return 0;                                                                                      \
}

MT_LAYER_NORM_SHORT_WIDTHS(mt_layer_norm_short_f, float, sqrtf)
MT_LAYER_NORM_SHORT_WIDTHS(mt_layer_norm_short_d, double, sqrt)

#endif
