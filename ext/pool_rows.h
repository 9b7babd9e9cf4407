/* Row loops of AveragePool and AveragePoolGrad by rows (ext/pool.pyx: avg_pool_rows,
   avg_pool_grad_rows), one plane at a time, in float (suffix _f) and double (_d). */
#ifndef MINITRAIN_POOL_ROWS_H
#define MINITRAIN_POOL_ROWS_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Row loops over restrict pointers: no aliasing checks or loop versioning, which otherwise
   cost more than the 32-element rows of a typical pooling plane.  Each macro is expanded
   for float (suffix _f) and double (_d). */

/* out[j] = sum over t < k of src[j + shift[t]] (times scale[j] when SCALED), for j < n;
   out and src are distinct buffers. */
#define MT_SUM_TAPS(NAME, T, SCALED)                                                            \
static void NAME(T* __restrict out, const T* __restrict src, const ptrdiff_t* shift,            \
                 ptrdiff_t k, ptrdiff_t n, const T* __restrict scale) {                         \
    const ptrdiff_t s0 = shift[0];                                                              \
    if (k == 1) {                                                                               \
        for (ptrdiff_t j = 0; j < n; j++) out[j] = SCALED ? src[j + s0] * scale[j] : src[j + s0]; \
        return;                                                                                 \
    }                                                                                           \
    const ptrdiff_t s1 = shift[1];                                                              \
    if (k == 2) {                                                                               \
        for (ptrdiff_t j = 0; j < n; j++) {                                                     \
            T v = src[j + s0] + src[j + s1];                                                    \
            out[j] = SCALED ? v * scale[j] : v;                                                 \
        }                                                                                       \
        return;                                                                                 \
    }                                                                                           \
    const ptrdiff_t s2 = shift[2];                                                              \
    if (k == 3) {                                                                               \
        for (ptrdiff_t j = 0; j < n; j++) {                                                     \
            T v = src[j + s0] + src[j + s1] + src[j + s2];                                      \
            out[j] = SCALED ? v * scale[j] : v;                                                 \
        }                                                                                       \
        return;                                                                                 \
    }                                                                                           \
    for (ptrdiff_t j = 0; j < n; j++) out[j] = src[j + s0] + src[j + s1] + src[j + s2];         \
    for (ptrdiff_t t = 3; t < k; t++) {                                                         \
        const ptrdiff_t st = shift[t];                                                          \
        for (ptrdiff_t j = 0; j < n; j++) out[j] += src[j + st];                                \
    }                                                                                           \
    if (SCALED) for (ptrdiff_t j = 0; j < n; j++) out[j] *= scale[j];                           \
}
MT_SUM_TAPS(mt_sum_taps_f, float, 0)
MT_SUM_TAPS(mt_sum_taps_d, double, 0)
MT_SUM_TAPS(mt_sum_taps_scaled_f, float, 1)
MT_SUM_TAPS(mt_sum_taps_scaled_d, double, 1)

/* out[j] = sum over r < R (R >= 1) of rows[r][j], rows[r] = base + idx[r] * pitch. */
#define MT_SUM_ROWS(NAME, T)                                                                    \
static void NAME##_2(T* __restrict out, const T* __restrict a, const T* __restrict b,           \
                     ptrdiff_t n) {                                                             \
    for (ptrdiff_t j = 0; j < n; j++) out[j] = a[j] + b[j];                                     \
}                                                                                               \
static void NAME##_3(T* __restrict out, const T* __restrict a, const T* __restrict b,           \
                     const T* __restrict c, ptrdiff_t n) {                                      \
    for (ptrdiff_t j = 0; j < n; j++) out[j] = a[j] + b[j] + c[j];                              \
}                                                                                               \
static void NAME##_acc(T* __restrict out, const T* __restrict a, ptrdiff_t n) {                 \
    for (ptrdiff_t j = 0; j < n; j++) out[j] += a[j];                                           \
}                                                                                               \
static void NAME(T* out, const T* base, const ptrdiff_t* idx, ptrdiff_t R,                      \
                 ptrdiff_t pitch, ptrdiff_t n) {                                                \
    const T* a = base + idx[0] * pitch;                                                         \
    if (R == 1) { memcpy(out, a, n * sizeof(T)); return; }                                      \
    const T* b = base + idx[1] * pitch;                                                         \
    if (R == 2) { NAME##_2(out, a, b, n); return; }                                             \
    NAME##_3(out, a, b, base + idx[2] * pitch, n);                                              \
    for (ptrdiff_t r = 3; r < R; r++) NAME##_acc(out, base + idx[r] * pitch, n);                \
}
MT_SUM_ROWS(mt_sum_rows_f, float)
MT_SUM_ROWS(mt_sum_rows_d, double)

/* out[j] = cw[j] * sum over r < R (R >= 1) of w[r] * rows[r][j], rows[r] = base + idx[r]
   * pitch: AveragePoolGrad's dY rows times the separable reciprocal counts (w: per row,
   the D and H factors; cw: per column, the W factor). */
#define MT_WEIGHTED_ROWS(NAME, T)                                                               \
static void NAME##_1(T* __restrict out, const T* __restrict a, T wa,                            \
                     const T* __restrict cw, ptrdiff_t n) {                                     \
    for (ptrdiff_t j = 0; j < n; j++) out[j] = cw[j] * (wa * a[j]);                             \
}                                                                                               \
static void NAME##_2(T* __restrict out, const T* __restrict a, T wa, const T* __restrict b,     \
                     T wb, const T* __restrict cw, ptrdiff_t n) {                               \
    for (ptrdiff_t j = 0; j < n; j++) out[j] = cw[j] * (wa * a[j] + wb * b[j]);                 \
}                                                                                               \
static void NAME##_3(T* __restrict out, const T* __restrict a, T wa, const T* __restrict b,     \
                     T wb, const T* __restrict c, T wc, const T* __restrict cw,                 \
                     ptrdiff_t n) {                                                             \
    for (ptrdiff_t j = 0; j < n; j++) out[j] = cw[j] * (wa * a[j] + wb * b[j] + wc * c[j]);     \
}                                                                                               \
static void NAME##_acc(T* __restrict out, const T* __restrict a, T wa, ptrdiff_t n) {           \
    for (ptrdiff_t j = 0; j < n; j++) out[j] += wa * a[j];                                      \
}                                                                                               \
static void NAME(T* out, const T* base, const ptrdiff_t* idx, const T* w, ptrdiff_t R,          \
                 ptrdiff_t pitch, const T* cw, ptrdiff_t n) {                                   \
    const T* a = base + idx[0] * pitch;                                                         \
    if (R == 1) { NAME##_1(out, a, w[0], cw, n); return; }                                      \
    const T* b = base + idx[1] * pitch;                                                         \
    if (R == 2) { NAME##_2(out, a, w[0], b, w[1], cw, n); return; }                             \
    if (R == 3) { NAME##_3(out, a, w[0], b, w[1], base + idx[2] * pitch, w[2], cw, n); return; } \
    for (ptrdiff_t j = 0; j < n; j++) out[j] = 0;                                               \
    for (ptrdiff_t r = 0; r < R; r++) NAME##_acc(out, base + idx[r] * pitch, w[r], n);          \
    for (ptrdiff_t j = 0; j < n; j++) out[j] *= cw[j];                                          \
}
MT_WEIGHTED_ROWS(mt_weighted_rows_f, float)
MT_WEIGHTED_ROWS(mt_weighted_rows_d, double)

/* y[o] = scale[o] * (sum of v[lo[o]] .. v[hi[o] - 1]): windows of one row, dilation 1. */
#define MT_WINDOW_SUMS(NAME, T)                                                                 \
static void NAME(T* __restrict y, const T* __restrict v, const ptrdiff_t* __restrict lo,        \
                 const ptrdiff_t* __restrict hi, const T* __restrict scale, ptrdiff_t n) {      \
    for (ptrdiff_t o = 0; o < n; o++) {                                                         \
        T acc = 0;                                                                              \
        for (ptrdiff_t j = lo[o]; j < hi[o]; j++) acc += v[j];                                  \
        y[o] = acc * scale[o];                                                                  \
    }                                                                                           \
}                                                                                               \
static void NAME##_pairs(T* __restrict y, const T* __restrict v, const T* __restrict scale,     \
                         ptrdiff_t n) {                                                         \
    for (ptrdiff_t o = 0; o < n; o++) y[o] = (v[2 * o] + v[2 * o + 1]) * scale[o];              \
}
MT_WINDOW_SUMS(mt_window_sums_f, float)
MT_WINDOW_SUMS(mt_window_sums_d, double)

/* out[w] = v[w / k] for w < min(W, n * k), 0 after: non-overlapping windows of k spread
   back over the row (k == 2 as one vectorised loop). */
#define MT_SPREAD(NAME, T)                                                                      \
static void NAME(T* __restrict out, const T* __restrict v, ptrdiff_t k, ptrdiff_t n,            \
                 ptrdiff_t W) {                                                                 \
    ptrdiff_t w = 0;                                                                            \
    if (k == 2 && 2 * n <= W) {                                                                 \
        for (ptrdiff_t o = 0; o < n; o++) { out[2 * o] = v[o]; out[2 * o + 1] = v[o]; }         \
        w = 2 * n;                                                                              \
    } else {                                                                                    \
        for (ptrdiff_t o = 0; o < n && w < W; o++) {                                            \
            const T x = v[o];                                                                   \
            const ptrdiff_t end = w + k < W ? w + k : W;                                        \
            for (; w < end; w++) out[w] = x;                                                    \
        }                                                                                       \
    }                                                                                           \
    for (; w < W; w++) out[w] = 0;                                                              \
}
MT_SPREAD(mt_spread_f, float)
MT_SPREAD(mt_spread_d, double)

/* One plane of AveragePool by rows (see avg_pool_rows): output row r sums the input rows
   rows[ptr[r]:ptr[r + 1]] (W wide) into buf + r * ext + lead, or reads the input row
   itself when it is the only one and `direct`; then along W by `mode` (0 taps, 1 windows,
   2 pairs) with the W table wt0 (taps or window starts), wt1 (window ends) and k taps.
   All row sums come first: reading a row right after storing it at a shifted offset
   would stall on store forwarding. */
#define MT_AVG_PLANE(NAME, T, SFX)                                                              \
static void NAME(T* y, const T* x, T* buf, const ptrdiff_t* ptr, const ptrdiff_t* rows,         \
                 ptrdiff_t nrows, ptrdiff_t W, ptrdiff_t OW, int mode, ptrdiff_t lead,          \
                 ptrdiff_t ext, int direct, const ptrdiff_t* wt0, const ptrdiff_t* wt1,         \
                 ptrdiff_t k, const T* scale) {                                                 \
    for (ptrdiff_t r = 0; r < nrows; r++) {                                                     \
        const ptrdiff_t R = ptr[r + 1] - ptr[r];                                                \
        if (R > 1 || !direct) mt_sum_rows_##SFX(buf + r * ext + lead, x, rows + ptr[r], R, W, W); \
    }                                                                                           \
    for (ptrdiff_t r = 0; r < nrows; r++) {                                                     \
        const T* v = ptr[r + 1] - ptr[r] == 1 && direct ? x + rows[ptr[r]] * W : buf + r * ext; \
        T* out = y + r * OW;                                                                    \
        const T* s = scale + r * OW;                                                            \
        if (mode == 0) mt_sum_taps_scaled_##SFX(out, v, wt0, k, OW, s);                         \
        else if (mode == 1) mt_window_sums_##SFX(out, v, wt0, wt1, s, OW);                      \
        else mt_window_sums_##SFX##_pairs(out, v, s, OW);                                       \
    }                                                                                           \
}
MT_AVG_PLANE(mt_avg_plane_f, float, f)
MT_AVG_PLANE(mt_avg_plane_d, double, d)

/* One plane of AveragePoolGrad by rows (see avg_pool_grad_rows): dX row r gets the dY rows
   rows[ptr[r]:ptr[r + 1]] (OW wide) weighted by w (per row) and cw (per column) in
   buf + r * ext + lead, then along W taps (shift, kw) or, when `spread`, windows of kw.
   With `post` (taps, every window counting the same) the rows are summed unweighted and
   the taps' sums times post (that count's reciprocal, W long): fewer loads and products.
   All weighted rows come first, as in MT_AVG_PLANE. */
#define MT_AVG_GRAD_PLANE(NAME, T, SFX)                                                         \
static void NAME(T* dx, const T* dy, T* buf, const ptrdiff_t* ptr, const ptrdiff_t* rows,       \
                 const T* w, ptrdiff_t nrows, ptrdiff_t W, ptrdiff_t OW, const T* cw,           \
                 int spread, ptrdiff_t lead, ptrdiff_t ext, const ptrdiff_t* shift,             \
                 ptrdiff_t kw, const T* post) {                                                 \
    for (ptrdiff_t r = 0; r < nrows; r++) {                                                     \
        const ptrdiff_t R = ptr[r + 1] - ptr[r];                                                \
        if (R == 0) continue;                                                                   \
        if (post) mt_sum_rows_##SFX(buf + r * ext + lead, dy, rows + ptr[r], R, OW, OW);        \
        else mt_weighted_rows_##SFX(buf + r * ext + lead, dy, rows + ptr[r], w + ptr[r], R, OW, cw, OW); \
    }                                                                                           \
    for (ptrdiff_t r = 0; r < nrows; r++) {                                                     \
        T* out = dx + r * W;                                                                    \
        const T* v = buf + r * ext + lead;                                                      \
        if (ptr[r + 1] == ptr[r]) memset(out, 0, W * sizeof(T));                                \
        else if (spread) mt_spread_##SFX(out, v, kw, OW, W);                                    \
        else if (post) mt_sum_taps_scaled_##SFX(out, v, shift, kw, W, post);                    \
        else mt_sum_taps_##SFX(out, v, shift, kw, W, NULL);                                     \
    }                                                                                           \
}
MT_AVG_GRAD_PLANE(mt_avg_grad_plane_f, float, f)
MT_AVG_GRAD_PLANE(mt_avg_grad_plane_d, double, d)

#endif
