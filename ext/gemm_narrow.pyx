# cython: language_level=3
"""Float32 GEMMs of many rows by a narrow matrix (ext/gemm_narrow.h): Y = alpha X B * scale + shift and
C = alpha A^T D for products 8 or 16 floats wide, the GEMMs of a Linear layer over an
activation's pixels.  `FAST` says whether this build has the AVX registers that make them
faster than BLAS (in the baseline build they give the same results slowly).  OpenMP threads
take bands of rows; C = A^T D sums the bands' partial products.
"""
from cython.parallel cimport prange

import numpy as np

cdef extern from "gemm_narrow.h" nogil:
    enum:
        MT_GEMM_NARROW_FAST
        MT_GN_LANES
        MT_GN_MAX_VECTORS
    void mt_gemm_narrow_rows(const float* x, const float* b, const float* scales, const float* shifts, float* y,
                             long m, long k_dim, float alpha, int nv)
    void mt_gemm_narrow_tn(const float* a, const float* d, float* c, long m, long k_dim, float alpha, int nv)

FAST = bool(MT_GEMM_NARROW_FAST)
WIDTHS = tuple(MT_GN_LANES * v for v in range(1, MT_GN_MAX_VECTORS + 1))      # the product widths served


cdef int _vectors(Py_ssize_t n, str what) except -1:
    if n not in WIDTHS:
        raise ValueError(f"gemm_narrow.{what}: the product is {n} wide; it must be one of {WIDTHS}")
    return <int>(n // MT_GN_LANES)


def rows(const float[:, ::1] x, const float[:, ::1] b, const float[::1] bias, float[:, ::1] y, float alpha,
         int num_threads, const float[::1] scale=None):
    """y = alpha x @ b, times `scale` on every row and plus `bias` on every row where they are
    not None; rows of y in num_threads bands."""
    cdef Py_ssize_t m = x.shape[0], k = x.shape[1], n = b.shape[1], band, r0, count
    if (b.shape[0] != k or y.shape[0] != m or y.shape[1] != n or (bias is not None and bias.shape[0] != n)
            or (scale is not None and scale.shape[0] != n)):
        raise ValueError(f"gemm_narrow.rows: x {tuple(x.shape)} times b {tuple(b.shape)}, scale "
                         f"{None if scale is None else tuple(scale.shape)} and bias "
                         f"{None if bias is None else tuple(bias.shape)} do not make y {tuple(y.shape)}")
    cdef int nv = _vectors(n, "rows")
    cdef const float* shifts = NULL if bias is None else &bias[0]
    cdef const float* scales = NULL if scale is None else &scale[0]
    if m == 0:
        return
    if k == 0:
        for r0 in range(m):
            for band in range(n):
                y[r0, band] = 0 if bias is None else bias[band]
        return
    for band in prange(num_threads, nogil=True, schedule="static", num_threads=num_threads):
        r0 = band * m // num_threads
        count = (band + 1) * m // num_threads - r0
        if count > 0:
            mt_gemm_narrow_rows(&x[r0, 0], &b[0, 0], scales, shifts, &y[r0, 0], count, k, alpha, nv)


def tn(const float[:, ::1] a, const float[:, ::1] d, float[:, ::1] c, float alpha, int num_threads):
    """c = alpha a^T @ d, the rows of a and d in num_threads bands whose products are summed."""
    cdef Py_ssize_t m = a.shape[0], k = a.shape[1], n = d.shape[1], band, r0, count, i, j
    if d.shape[0] != m or c.shape[0] != k or c.shape[1] != n:
        raise ValueError(f"gemm_narrow.tn: a {tuple(a.shape)} transposed times d {tuple(d.shape)} does not "
                         f"make c {tuple(c.shape)}")
    cdef int nv = _vectors(n, "tn")
    if k == 0:
        return
    if m == 0 or num_threads <= 1:
        if m == 0:
            c[:, :] = 0
        else:
            mt_gemm_narrow_tn(&a[0, 0], &d[0, 0], &c[0, 0], m, k, alpha, nv)
        return
    cdef float[:, :, ::1] parts = np.zeros((num_threads, k, n), dtype=np.float32)
    for band in prange(num_threads, nogil=True, schedule="static", num_threads=num_threads):
        r0 = band * m // num_threads
        count = (band + 1) * m // num_threads - r0
        if count > 0:
            mt_gemm_narrow_tn(&a[r0, 0], &d[r0, 0], &parts[band, 0, 0], count, k, alpha, nv)
    for i in range(k):
        for j in range(n):
            c[i, j] = parts[0, i, j]
            for band in range(1, num_threads):
                c[i, j] += parts[band, i, j]
