/* Float32 GEMMs with many rows and a narrow product (ext/gemm_narrow.pyx), the products of a
   Linear layer over the pixels of an activation: 4096 rows of 8 or 16 channels.  BLAS runs
   these shapes well below the FMA units' rate (its kernels block for square-ish products);
   here the product's width N is one or two vectors of 8 floats, held in registers:

     rows:  Y = alpha X B * scale + shift     X (M, K), B (K, N), Y (M, N); scale and shift
                                              (N,) each, or none (1 and 0)
     tn:    C = alpha A^T D           A (M, K), D (M, N), C (K, N)

   rows takes four rows at once, so that four independent FMA chains hide the FMA latency; tn
   keeps a block of C's rows in registers over all of A's and D's rows.  The vectors are GCC
   vector types of 32 bytes: AVX registers where the build has AVX (MT_GEMM_NARROW_FAST is 1),
   pairs of SSE registers in the baseline build, which gives the same results slowly, so that
   its callers use BLAS there. */
#ifndef MT_GEMM_NARROW_H
#define MT_GEMM_NARROW_H

#include <string.h>

#if defined(__AVX__)
#define MT_GEMM_NARROW_FAST 1
#else
#define MT_GEMM_NARROW_FAST 0
#endif

#define MT_GN_LANES 8           /* floats in a vector */
#define MT_GN_MAX_VECTORS 2     /* the widest product: 16 floats */
#define MT_GN_ROWS 4            /* rows of X per step of rows */
#define MT_GN_REGISTERS 16      /* accumulators of tn */

typedef float mt_gn_v __attribute__((vector_size(32)));

#define MT_GN_LOAD(v, p) memcpy(&(v), (p), sizeof(mt_gn_v))
#define MT_GN_STORE(p, v) memcpy((p), &(v), sizeof(mt_gn_v))

static inline __attribute__((always_inline)) void mt_gn_rows_nv(
    const float* restrict x, const float* restrict b, const float* restrict scales, const float* restrict shifts,
    float* restrict y, long m, long k_dim, float alpha, const int nv)
{
    const long n = (long)nv * MT_GN_LANES;
    const mt_gn_v zero = {0};
    mt_gn_v scale[MT_GN_MAX_VECTORS], shift[MT_GN_MAX_VECTORS];
    for (int j = 0; j < nv; j++) {
        scale[j] = zero + 1.0f;
        shift[j] = zero;
        if (scales)
            MT_GN_LOAD(scale[j], scales + j * MT_GN_LANES);
        if (shifts)
            MT_GN_LOAD(shift[j], shifts + j * MT_GN_LANES);
        scale[j] *= alpha;
    }
    long r = 0;
    for (; r + MT_GN_ROWS <= m; r += MT_GN_ROWS) {
        mt_gn_v acc[MT_GN_ROWS][MT_GN_MAX_VECTORS];
        for (int i = 0; i < MT_GN_ROWS; i++)
            for (int j = 0; j < nv; j++)
                acc[i][j] = zero;
        for (long k = 0; k < k_dim; k++) {
            mt_gn_v bv[MT_GN_MAX_VECTORS];
            for (int j = 0; j < nv; j++)
                MT_GN_LOAD(bv[j], b + k * n + j * MT_GN_LANES);
            for (int i = 0; i < MT_GN_ROWS; i++) {
                const mt_gn_v s = zero + x[(r + i) * k_dim + k];
                for (int j = 0; j < nv; j++)
                    acc[i][j] += s * bv[j];
            }
        }
        for (int i = 0; i < MT_GN_ROWS; i++)
            for (int j = 0; j < nv; j++) {
                const mt_gn_v out = acc[i][j] * scale[j] + shift[j];
                MT_GN_STORE(y + (r + i) * n + j * MT_GN_LANES, out);
            }
    }
    for (; r < m; r++) {
        mt_gn_v acc[MT_GN_MAX_VECTORS];
        for (int j = 0; j < nv; j++)
            acc[j] = zero;
        for (long k = 0; k < k_dim; k++) {
            const mt_gn_v s = zero + x[r * k_dim + k];
            for (int j = 0; j < nv; j++) {
                mt_gn_v bv;
                MT_GN_LOAD(bv, b + k * n + j * MT_GN_LANES);
                acc[j] += s * bv;
            }
        }
        for (int j = 0; j < nv; j++) {
            const mt_gn_v out = acc[j] * scale[j] + shift[j];
            MT_GN_STORE(y + r * n + j * MT_GN_LANES, out);
        }
    }
}

/* Y = alpha X B * scales + shifts over m rows (either vector NULL: none); N = nv * 8, nv 1 or 2. */
static void mt_gemm_narrow_rows(const float* x, const float* b, const float* scales, const float* shifts, float* y,
                                long m, long k_dim, float alpha, int nv)
{
    if (nv == 1)
        mt_gn_rows_nv(x, b, scales, shifts, y, m, k_dim, alpha, 1);
    else
        mt_gn_rows_nv(x, b, scales, shifts, y, m, k_dim, alpha, 2);
}

/* Rows [k0, k0 + kb) of C = alpha A^T D, kb * nv <= MT_GN_REGISTERS accumulators. */
static inline __attribute__((always_inline)) void mt_gn_tn_block(
    const float* restrict a, const float* restrict d, float* restrict c, long m, long k_dim, long k0, float alpha,
    const int kb, const int nv)
{
    const long n = (long)nv * MT_GN_LANES;
    const mt_gn_v zero = {0};
    mt_gn_v acc[MT_GN_REGISTERS];
    for (int i = 0; i < kb * nv; i++)
        acc[i] = zero;
    for (long r = 0; r < m; r++) {
        mt_gn_v dv[MT_GN_MAX_VECTORS];
        for (int j = 0; j < nv; j++)
            MT_GN_LOAD(dv[j], d + r * n + j * MT_GN_LANES);
        for (int kk = 0; kk < kb; kk++) {
            const mt_gn_v s = zero + a[r * k_dim + k0 + kk];
            for (int j = 0; j < nv; j++)
                acc[kk * nv + j] += s * dv[j];
        }
    }
    for (int kk = 0; kk < kb; kk++)
        for (int j = 0; j < nv; j++) {
            const mt_gn_v out = acc[kk * nv + j] * alpha;
            MT_GN_STORE(c + (k0 + kk) * n + j * MT_GN_LANES, out);
        }
}

/* C's rows in blocks of kb (a power of two), the last ones in halving blocks. */
static inline __attribute__((always_inline)) void mt_gn_tn_nv(
    const float* a, const float* d, float* c, long m, long k_dim, float alpha, const int nv, const int kb)
{
    long k0 = 0;
    for (; k0 + kb <= k_dim; k0 += kb)
        mt_gn_tn_block(a, d, c, m, k_dim, k0, alpha, kb, nv);
    for (int half = kb / 2; half >= 1; half /= 2)
        if (k0 + half <= k_dim) {
            mt_gn_tn_block(a, d, c, m, k_dim, k0, alpha, half, nv);
            k0 += half;
        }
}

/* C = alpha A^T D over m rows; N = nv * 8, nv 1 or 2. */
static void mt_gemm_narrow_tn(const float* a, const float* d, float* c, long m, long k_dim, float alpha, int nv)
{
    if (nv == 1)
        mt_gn_tn_nv(a, d, c, m, k_dim, alpha, 1, MT_GN_REGISTERS);
    else
        mt_gn_tn_nv(a, d, c, m, k_dim, alpha, 2, MT_GN_REGISTERS / 2);
}

#endif
