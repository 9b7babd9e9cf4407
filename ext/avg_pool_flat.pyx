# cython: language_level=3
"""Stride-1 average pooling over whole planes, forward and gradient, when the output is as
wide as the input (3x3 s1 p1, 5x5 s1 p2, ...): two flat passes over each (rows, W) plane.

Flattened, a stride-1 window sum along H is the plane shifted by whole rows, and along W the
plane shifted by a few columns; with equal widths both are plain offsets into one flat array,
so each pass is a few long vectorisable loops, where going row by row costs 2-3 loops per row
(a 32-wide float32 row is only two AVX-512 vectors).  For output row i and column j:

  rows     V[i, :] = sum over the H taps a of rh_a * src[i + s_a, :], skipping the source rows
           outside the plane; consecutive output rows with the same valid taps and weights
           form one run, one loop over its flat range.
  columns  dst[i, j] = sum over the W taps b of cw_b[j] * V[i, j + c_b], each term kept only
           where column j + c_b lies inside the row: the table cw_b is 0 elsewhere (a select,
           not a product: an inf must not turn into NaN in the next row).  The tables cover a
           whole number of rows and the plane is done table by table; V has zero margins, so
           the skipped reads stay in bounds.

AveragePool (src = X):       s_a = a * dil_h - pad_top, c_b = b * dil_w - pad_left, rh and
                             cw the H and W factors of the output window's reciprocal count.
AveragePoolGrad (src = dY):  s_a = pad_top - a * dil_h, c_b = pad_left - b * dil_w, rh and cw
                             those factors of the window being read (a box's count is the
                             product of its per-axis counts).
When every window counts the same (count_include_pad, or no window reaching into the padding)
the weights are 1, the tables 0/1 masks, and the sum is times that one reciprocal, `post`: no
products in the rows pass, and the tap with c_b == 0 (each output's own column, always inside
the row) reads no table.
"""
from cython.parallel cimport prange, threadid
from libc.string cimport memset

import numpy as np

cdef extern from "avg_pool_flat.h":
    void mt_flat_rows_f(float* v, const float* src, const float* w, const Py_ssize_t* s, Py_ssize_t R,
                        Py_ssize_t n) noexcept nogil
    void mt_flat_rows_d(double* v, const double* src, const double* w, const Py_ssize_t* s, Py_ssize_t R,
                        Py_ssize_t n) noexcept nogil
    void mt_flat_columns_f(float* out, const float* v, const float* m, Py_ssize_t L, const Py_ssize_t* c,
                           Py_ssize_t K, Py_ssize_t n, float post, int uniform) noexcept nogil
    void mt_flat_columns_d(double* out, const double* v, const double* m, Py_ssize_t L, const Py_ssize_t* c,
                           Py_ssize_t K, Py_ssize_t n, double post, int uniform) noexcept nogil

ctypedef fused real:
    float
    double

include "thresholds.pxi"

cdef enum:
    ALIGN = 16                  # V starts on a multiple of this many elements (a 64-byte line of float32)


cdef void _plane(const real* src, real* dst, real* v, const Py_ssize_t* runs, Py_ssize_t nruns,
                 const Py_ssize_t* ptr, const Py_ssize_t* shifts, const real* weights, Py_ssize_t W,
                 Py_ssize_t P, const real* tables, Py_ssize_t L, const Py_ssize_t* cols, Py_ssize_t K,
                 real post) noexcept nogil:
    cdef Py_ssize_t r, start, n, R
    cdef const real* w = NULL
    for r in range(nruns):
        start = runs[2 * r] * W
        n = (runs[2 * r + 1] - runs[2 * r]) * W
        R = ptr[r + 1] - ptr[r]
        if weights != NULL:
            w = weights + ptr[r]
        if R == 0:
            memset(v + start, 0, n * sizeof(real))
        elif real is float:
            mt_flat_rows_f(v + start, src + start, w, shifts + ptr[r], R, n)
        else:
            mt_flat_rows_d(v + start, src + start, w, shifts + ptr[r], R, n)
    for r in range((P + L - 1) // L):
        start = r * L
        n = min(L, P - start)
        if real is float:
            mt_flat_columns_f(dst + start, v + start, tables, L, cols, K, n, post, weights == NULL)
        else:
            mt_flat_columns_d(dst + start, v + start, tables, L, cols, K, n, post, weights == NULL)


def window_sums(const real[:, ::1] src, real[:, ::1] dst, Py_ssize_t W,
                const Py_ssize_t[:, ::1] runs, const Py_ssize_t[::1] ptr, const Py_ssize_t[::1] shifts,
                const real[::1] weights, const real[:, ::1] tables, const Py_ssize_t[::1] cols,
                double post, int num_threads):
    """dst planes from src planes, both whole rows of W, by the two passes above.

    runs (nruns, 2): the dst rows [first, last) of each run, covering them in order;
    ptr / shifts: CSR lists of each run's H taps as flat offsets into src (s_a * W); weights:
    beside shifts, the taps' rh, or empty when every window counts `post`; tables (K, L):
    per W tap its cw over L elements, a whole number of rows; cols (K): the W taps' c_b."""
    cdef Py_ssize_t planes = src.shape[0], nruns = runs.shape[0], K = cols.shape[0], L = tables.shape[1]
    cdef Py_ssize_t rows, src_size, P, r, t, p, lead, tail, row = 0, skew
    if W < 1 or dst.shape[0] != planes or dst.shape[1] % W or src.shape[1] % W:
        raise ValueError("window_sums: the planes are not whole rows of W")
    rows, src_size, P = dst.shape[1] // W, src.shape[1], dst.shape[1]
    if ptr.shape[0] != nruns + 1 or ptr[0] != 0 or ptr[nruns] != shifts.shape[0]:
        raise ValueError("window_sums: malformed run table")
    for r in range(nruns):
        if runs[r, 0] != row or runs[r, 1] <= row or ptr[r + 1] < ptr[r]:
            raise ValueError("window_sums: the runs do not cover the rows in order")
        row = runs[r, 1]
        for t in range(ptr[r], ptr[r + 1]):
            if shifts[t] % W or runs[r, 0] * W + shifts[t] < 0 or runs[r, 1] * W + shifts[t] > src_size:
                raise ValueError("window_sums: a row tap leaves the source plane")
    if row != rows:
        raise ValueError("window_sums: the runs do not cover the rows in order")
    if weights.shape[0] not in (0, shifts.shape[0]) or tables.shape[0] != K or K < 1 or L < W or L % W:
        raise ValueError("window_sums: weights or column tables disagree with the geometry")
    if planes == 0 or P == 0:
        return
    lead, tail = 0, 0
    for t in range(K):
        lead = max(lead, -cols[t])
        tail = max(tail, cols[t])
    lead = (lead + ALIGN - 1) // ALIGN * ALIGN
    cdef int nt = threads_for(planes * (src_size + P), num_threads, MT_MIN_PARALLEL_STREAM)
    nt = min(nt, planes)
    # per-thread V planes with zero margins (only [lead, lead + P) is ever written), each
    # starting on a 64-byte boundary (skew: the elements to the first one)
    scratch = np.zeros((nt, (lead + P + tail + 2 * ALIGN - 1) // ALIGN * ALIGN + ALIGN),
                       dtype=np.float32 if real is float else np.float64)
    cdef real[:, ::1] sc = scratch
    skew = (-(<Py_ssize_t>&sc[0, 0] // sizeof(real))) % ALIGN
    cdef const real* w = &weights[0] if weights.shape[0] else NULL
    cdef const Py_ssize_t* shift_p = &shifts[0] if shifts.shape[0] else NULL
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        _plane(&src[p, 0], &dst[p, 0], &sc[threadid(), skew + lead], &runs[0, 0], nruns, &ptr[0], shift_p, w,
               W, P, &tables[0, 0], L, &cols[0], K, <real>post)
