/* The two flat passes of stride-1 average pooling (ext/avg_pool_flat.pyx: window_sums), in
   float (suffix _f) and double (_d). */
#ifndef MINITRAIN_AVG_POOL_FLAT_H
#define MINITRAIN_AVG_POOL_FLAT_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* v[k] = sum over t < R of w[t] * src[k + s[t]] (w NULL: weights 1), k < n; R >= 1.
   src points at the run's first element; restrict: no loop versioning. */
#define MT_FLAT_ROWS(NAME, T)                                                                   \
static __attribute__((noinline)) void                                                           \
NAME(T* __restrict v, const T* __restrict src, const T* w, const ptrdiff_t* s,                  \
     ptrdiff_t R, ptrdiff_t n) {                                                                \
    const T* __restrict a = src + s[0];                                                         \
    const T* __restrict b = src + s[R > 1 ? 1 : 0];                                             \
    const T* __restrict c = src + s[R > 2 ? 2 : 0];                                             \
    if (R == 3 && w) {                                                                          \
        const T wa = w[0], wb = w[1], wc = w[2];                                                \
        for (ptrdiff_t k = 0; k < n; k++) v[k] = wa * a[k] + wb * b[k] + wc * c[k];             \
        return;                                                                                 \
    }                                                                                           \
    if (R == 3) {                                                                               \
        for (ptrdiff_t k = 0; k < n; k++) v[k] = a[k] + b[k] + c[k];                            \
        return;                                                                                 \
    }                                                                                           \
    for (ptrdiff_t k = 0; k < n; k++) v[k] = 0;                                                 \
    for (ptrdiff_t t = 0; t < R; t++) {                                                         \
        const T* __restrict x = src + s[t];                                                     \
        const T wt = w ? w[t] : 1;                                                              \
        for (ptrdiff_t k = 0; k < n; k++) v[k] += wt * x[k];                                    \
    }                                                                                           \
}
MT_FLAT_ROWS(mt_flat_rows_f, float)
MT_FLAT_ROWS(mt_flat_rows_d, double)

/* out[j] = sum over t < K of (m[t * L + j] != 0 ? m[t * L + j] * v[j + c[t]] : 0), j < n
   <= L: the W taps times the column weights (0 outside the row).  With `post` (every
   window counting the same) the tables are 0/1 masks, a tap with c[t] == 0 (each output's
   own column, always inside the row) reads no mask, and the sum is times post. */
#define MT_FLAT_COLUMNS(NAME, T)                                                                \
static __attribute__((noinline)) void                                                           \
NAME(T* __restrict out, const T* __restrict v, const T* __restrict m, ptrdiff_t L,              \
     const ptrdiff_t* c, ptrdiff_t K, ptrdiff_t n, T post, int uniform) {                       \
    const T* __restrict m0 = m;                                                                 \
    const T* __restrict m1 = m + (K > 1 ? L : 0);                                               \
    const T* __restrict m2 = m + (K > 2 ? 2 * L : 0);                                           \
    const T* __restrict v0 = v + c[0];                                                          \
    const T* __restrict v1 = v + c[K > 1 ? 1 : 0];                                              \
    const T* __restrict v2 = v + c[K > 2 ? 2 : 0];                                              \
    if (K == 3 && uniform && c[1] == 0) {                                                       \
        for (ptrdiff_t j = 0; j < n; j++)                                                       \
            out[j] = post * ((m0[j] != 0 ? v0[j] : 0) + v1[j] + (m2[j] != 0 ? v2[j] : 0));      \
        return;                                                                                 \
    }                                                                                           \
    if (K == 3 && !uniform) {                                                                   \
        for (ptrdiff_t j = 0; j < n; j++)                                                       \
            out[j] = (m0[j] != 0 ? m0[j] * v0[j] : 0) + (m1[j] != 0 ? m1[j] * v1[j] : 0)        \
                     + (m2[j] != 0 ? m2[j] * v2[j] : 0);                                        \
        return;                                                                                 \
    }                                                                                           \
    for (ptrdiff_t j = 0; j < n; j++) out[j] = 0;                                               \
    for (ptrdiff_t t = 0; t < K; t++) {                                                         \
        const T* __restrict mt = m + t * L;                                                     \
        const T* __restrict vt = v + c[t];                                                      \
        for (ptrdiff_t j = 0; j < n; j++) out[j] += mt[j] != 0 ? mt[j] * vt[j] : 0;             \
    }                                                                                           \
    if (uniform) for (ptrdiff_t j = 0; j < n; j++) out[j] *= post;                              \
}
MT_FLAT_COLUMNS(mt_flat_columns_f, float)
MT_FLAT_COLUMNS(mt_flat_columns_d, double)

#endif
