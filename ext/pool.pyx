# cython: language_level=3
"""Pooling kernels: MaxPool (with indices), AveragePool, their gradients, and global pooling.

Every tensor is contiguous and viewed as (planes, plane) with planes = N * C.  Spatial shapes
are always 3-D (D, H, W): 1-D and 2-D pooling pass leading axes of size 1 with kernel 1.
Planes are independent and split over OpenMP threads, so no two threads write the same
element; small tensors stay on one thread (ext/thresholds.h: MT_MIN_PARALLEL_GATHER elements of work
for the general loops, MT_MIN_PARALLEL_STREAM for the streaming kernels).

General paths take window geometry from Python (minitrain/ops/pool_geometry.py) as per-axis
tables `tab[a]` of shape (3, out_a): row 0 the input coordinate where window o starts, rows 1
and 2 the first and one-past-last tap of that window that land inside the input; taps sit at
start + t * dilation.  Average pooling also gets per-axis reciprocal window counts `inv[a]`
(the count of a box window is the product of per-axis counts).

Fast paths, picked by minitrain/providers/cpu/pool.py:
  max_pool_k2 / max_pool_grad_k2  kernel = stride = 2 along W (1 or 2 along H), no padding or
                 dilation: one vectorised loop per output row (float32 with AVX-512: masked
                 16-output steps, so short rows have no scalar tail; with AVX2: 8-output
                 steps, the last one overlapping); the gradient writes each window once (no
                 zero-fill first).
  avg_pool_rows / avg_pool_grad_rows  any geometry along D and H (Python lists, per row, the
                 rows each row sums: `ptr`/`rows` in CSR form); along W stride 1 (shifted sums
                 over a zero-margined row buffer), contiguous windows, or (gradient)
                 non-overlapping windows spread back.
MaxPoolGrad checks every index against its own plane before writing and returns the position
of the first bad one instead of writing out of bounds.
"""
from cython.parallel cimport prange, threadid
from libc.stdint cimport int64_t
from libc.string cimport memset

import numpy as np

cdef extern from "pool_rows.h":
    void mt_avg_plane_f(float* y, const float* x, float* buf, const Py_ssize_t* ptr, const Py_ssize_t* rows, Py_ssize_t nrows, Py_ssize_t W, Py_ssize_t OW, int mode, Py_ssize_t lead, Py_ssize_t ext, int direct, const Py_ssize_t* wt0, const Py_ssize_t* wt1, Py_ssize_t k, const float* scale) noexcept nogil
    void mt_avg_plane_d(double* y, const double* x, double* buf, const Py_ssize_t* ptr, const Py_ssize_t* rows, Py_ssize_t nrows, Py_ssize_t W, Py_ssize_t OW, int mode, Py_ssize_t lead, Py_ssize_t ext, int direct, const Py_ssize_t* wt0, const Py_ssize_t* wt1, Py_ssize_t k, const double* scale) noexcept nogil
    void mt_avg_grad_plane_f(float* dx, const float* dy, float* buf, const Py_ssize_t* ptr, const Py_ssize_t* rows, const float* w, Py_ssize_t nrows, Py_ssize_t W, Py_ssize_t OW, const float* cw, int spread, Py_ssize_t lead, Py_ssize_t ext, const Py_ssize_t* shift, Py_ssize_t kw, const float* post) noexcept nogil
    void mt_avg_grad_plane_d(double* dx, const double* dy, double* buf, const Py_ssize_t* ptr, const Py_ssize_t* rows, const double* w, Py_ssize_t nrows, Py_ssize_t W, Py_ssize_t OW, const double* cw, int spread, Py_ssize_t lead, Py_ssize_t ext, const Py_ssize_t* shift, Py_ssize_t kw, const double* post) noexcept nogil

cdef extern from "maxpool_k2.h":
    void mt_maxpool_k2_f(const float* r0, Py_ssize_t W, int two_rows, float* y, int64_t* ind, int64_t base, Py_ssize_t n) noexcept nogil
    void mt_maxpool_k2_d(const double* r0, Py_ssize_t W, int two_rows, double* y, int64_t* ind, int64_t base, Py_ssize_t n) noexcept nogil
    int mt_maxpool_k2_f_grad(const float* dy, const int64_t* ind, float* r0, Py_ssize_t W, int two_rows, int64_t base, Py_ssize_t n) noexcept nogil
    int mt_maxpool_k2_d_grad(const double* dy, const int64_t* ind, double* r0, Py_ssize_t W, int two_rows, int64_t base, Py_ssize_t n) noexcept nogil

ctypedef fused real:
    float
    double

include "thresholds.pxi"

cdef enum:
    GAP = 80        # elements between per-thread buffers (see avg_pool_grad)


cdef inline int _threads(Py_ssize_t work, Py_ssize_t planes, int num_threads,
                         Py_ssize_t min_work=MT_MIN_PARALLEL_GATHER) noexcept nogil:
    """Threads for `work` elements over `planes` planes (ext/thresholds.h): one below
    min_work, at most one per plane."""
    if planes < 2:
        return 1
    return <int>min(<Py_ssize_t>threads_for(work, num_threads, min_work), planes)


cdef inline void _add(real* dst, const real* src, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        dst[i] = dst[i] + src[i]


# --------------------------------------------------------------------------- MaxPool
cdef void _max_pool_plane(const real* x, real* y, int64_t* ind, int64_t base,
                          Py_ssize_t D, Py_ssize_t H, Py_ssize_t W,
                          Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                          Py_ssize_t dd, Py_ssize_t dh, Py_ssize_t dw,
                          const int64_t* td, const int64_t* th, const int64_t* tw,
                          bint col_major) noexcept nogil:
    cdef Py_ssize_t od, oh, ow, a, b, c, pd, ph, pw, k, best_k, q = 0
    cdef real v, best
    for od in range(OD):
        for oh in range(OH):
            for ow in range(OW):
                best_k = -1
                best = 0
                for a in range(td[OD + od], td[2 * OD + od]):
                    pd = td[od] + a * dd
                    for b in range(th[OH + oh], th[2 * OH + oh]):
                        ph = th[oh] + b * dh
                        for c in range(tw[OW + ow], tw[2 * OW + ow]):
                            pw = tw[ow] + c * dw
                            k = (pd * H + ph) * W + pw
                            v = x[k]
                            # first maximum wins; NaN propagates as in PyTorch
                            if best_k < 0 or v > best or v != v:
                                best = v
                                best_k = k
                y[q] = best
                if ind != NULL:
                    if col_major:
                        pw = best_k % W
                        ph = (best_k // W) % H
                        pd = best_k // (W * H)
                        ind[q] = base + pd + ph * D + pw * D * H
                    else:
                        ind[q] = base + best_k
                q = q + 1


def max_pool(const real[:, ::1] x, real[:, ::1] y, int64_t[:, ::1] indices, tuple in3, tuple out3,
             tuple dil3, const int64_t[:, ::1] td, const int64_t[:, ::1] th, const int64_t[:, ::1] tw,
             bint col_major, int num_threads):
    """y[p] = max over each window of x[p]; indices (or None) gets the flattened position of the
    first maximum over the whole N*C*spatial tensor (column-major spatial when col_major)."""
    cdef Py_ssize_t planes = x.shape[0], P = x.shape[1], p
    cdef Py_ssize_t D = in3[0], H = in3[1], W = in3[2], OD = out3[0], OH = out3[1], OW = out3[2]
    cdef Py_ssize_t dd = dil3[0], dh = dil3[1], dw = dil3[2]
    cdef bint with_ind = indices is not None
    cdef int nt = _threads(planes * P, planes, num_threads)
    if planes == 0:
        return
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        _max_pool_plane(&x[p, 0], &y[p, 0], &indices[p, 0] if with_ind else NULL, p * P,
                        D, H, W, OD, OH, OW, dd, dh, dw, &td[0, 0], &th[0, 0], &tw[0, 0], col_major)


cdef void _max_pool_grad_plane(const real* dy, const int64_t* ind, real* dx, Py_ssize_t Q, Py_ssize_t P,
                               int64_t base, bint col_major, Py_ssize_t D, Py_ssize_t H, Py_ssize_t W,
                               int64_t* bad) noexcept nogil:
    cdef Py_ssize_t q
    cdef int64_t i, pd, ph, pw
    memset(dx, 0, P * sizeof(real))
    bad[0] = -1
    for q in range(Q):
        i = ind[q] - base
        if i < 0 or i >= P:
            if bad[0] < 0:
                bad[0] = q
            continue
        if col_major:
            pd = i % D
            ph = (i // D) % H
            pw = i // (D * H)
            i = (pd * H + ph) * W + pw
        dx[i] = dx[i] + dy[q]


cdef Py_ssize_t _first_bad(const int64_t[::1] bad, Py_ssize_t Q):
    """Flat position p * Q + q of the first out-of-plane index (bad[p] = q or -1), or -1."""
    cdef Py_ssize_t p
    for p in range(bad.shape[0]):
        if bad[p] >= 0:
            return p * Q + bad[p]
    return -1


def max_pool_grad(const real[:, ::1] dy, const int64_t[:, ::1] indices, real[:, ::1] dx,
                  bint col_major, tuple in3, int num_threads):
    """dx[p] = scatter-add of dy[p] at indices[p] (flattened over the whole tensor, so plane p
    owns [p * plane, (p + 1) * plane)).  An index outside its plane is skipped, nothing is
    written out of bounds; returns the flat position in dy of the first such index, or -1."""
    cdef Py_ssize_t planes = dy.shape[0], Q = dy.shape[1], P = dx.shape[1], p
    cdef Py_ssize_t D = in3[0], H = in3[1], W = in3[2]
    cdef int nt = _threads(planes * (P + Q), planes, num_threads, MT_MIN_PARALLEL_STREAM)
    if indices.shape[0] != planes or indices.shape[1] != Q or dx.shape[0] != planes:
        raise ValueError("max_pool_grad: buffer shapes disagree")
    if D * H * W != P:
        raise ValueError("max_pool_grad: spatial shape does not match the plane size")
    if planes == 0 or P == 0:
        return -1
    cdef int64_t[::1] bad = np.empty(planes, dtype=np.int64)
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        _max_pool_grad_plane(&dy[p, 0] if Q else NULL, &indices[p, 0] if Q else NULL, &dx[p, 0], Q, P,
                             p * P, col_major, D, H, W, &bad[p])
    return _first_bad(bad, Q)


# --------------------------------------------------------------------------- MaxPool, k = s = 2
cdef inline void _k2_edge(const real* r0, Py_ssize_t W, Py_ssize_t rows, Py_ssize_t col, Py_ssize_t cols,
                          real* y, int64_t* ind, int64_t base) noexcept nogil:
    """One window of max_pool_k2 cut by the input's end: rows x cols taps from r0[col], in
    row-major order, with the full windows' rule (first maximum, last NaN)."""
    cdef Py_ssize_t a, b, k, best_k = col
    cdef real best = r0[col], v
    for a in range(rows):
        for b in range(cols):
            k = a * W + col + b
            v = r0[k]
            if v > best or v != v:
                best = v
                best_k = k
    y[0] = best
    if ind != NULL:
        ind[0] = base + best_k


def max_pool_k2(const real[:, ::1] x, real[:, ::1] y, int64_t[:, ::1] indices, Py_ssize_t W,
                Py_ssize_t kh, Py_ssize_t OH, int num_threads):
    """MaxPool with kernel = stride = 2 along W and kh (1 or 2) along H, no padding before,
    no dilation, every window starting inside the input and D untouched: one vectorised loop
    per output row over the whole windows; a last column and row of windows cut by the input's
    end (ceil_mode, or padding after) take the same rule tap by tap.  max_pool's results
    (indices: None, or row-major over the whole tensor)."""
    cdef Py_ssize_t planes = x.shape[0], P = x.shape[1], Q = y.shape[1], H, OW, p, oh, rows, whole
    cdef bint with_ind = indices is not None
    cdef const real* r0
    cdef int64_t base
    cdef int nt = _threads(planes * P, planes, num_threads, MT_MIN_PARALLEL_STREAM)
    if planes == 0 or Q == 0:
        return
    OW = Q // OH
    H = P // W
    if kh < 1 or kh > 2 or OH * OW != Q or H * W != P or (OH - 1) * kh >= H or 2 * (OW - 1) >= W \
            or y.shape[0] != planes or (with_ind and (indices.shape[0] != planes or indices.shape[1] != Q)):
        raise ValueError("max_pool_k2: buffer shapes disagree with the geometry")
    whole = min(OW, W // 2)
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        for oh in range(OH):
            r0 = &x[p, oh * kh * W]
            rows = min(kh, H - oh * kh)
            base = p * P + oh * kh * W
            if real is float:
                mt_maxpool_k2_f(r0, W, rows == 2, &y[p, oh * OW], &indices[p, oh * OW] if with_ind else NULL,
                                base, whole)
            else:
                mt_maxpool_k2_d(r0, W, rows == 2, &y[p, oh * OW], &indices[p, oh * OW] if with_ind else NULL,
                                base, whole)
            if whole < OW:
                _k2_edge(r0, W, rows, 2 * whole, W - 2 * whole, &y[p, oh * OW + whole],
                         &indices[p, oh * OW + whole] if with_ind else NULL, base)


def max_pool_grad_k2(const real[:, ::1] dy, const int64_t[:, ::1] indices, real[:, ::1] dx,
                     Py_ssize_t H, Py_ssize_t W, Py_ssize_t kh, Py_ssize_t OH, int num_threads):
    """MaxPoolGrad for max_pool_k2's geometry (input (H, W), OH rows of windows, D untouched):
    every window of dX is written once, dY where its index points and 0 elsewhere, and the
    rows and columns no window covers are zeroed, so dX is never zero-filled first; a last
    row or column of windows cut by the input's end is written tap by tap.  A plane whose
    indices do not all point into their own windows (MaxPool never makes such) is redone by
    max_pool_grad's scatter-add; returns what max_pool_grad returns."""
    cdef Py_ssize_t planes = dy.shape[0], Q = dy.shape[1], P = dx.shape[1], OW, p, oh, c, covered, rows, whole
    cdef int ok
    cdef real* row
    cdef int64_t base
    cdef int nt = _threads(planes * (P + Q), planes, num_threads, MT_MIN_PARALLEL_STREAM)
    if indices.shape[0] != planes or indices.shape[1] != Q or dx.shape[0] != planes:
        raise ValueError("max_pool_grad_k2: buffer shapes disagree")
    if H * W != P or kh < 1 or kh > 2:
        raise ValueError("max_pool_grad_k2: spatial shape does not match the plane size")
    if planes == 0 or P == 0:
        return -1
    OW = Q // OH if OH > 0 else 0
    if OH < 1 or OH * OW != Q or (OH - 1) * kh >= H or 2 * (OW - 1) >= W:
        raise ValueError("max_pool_grad_k2: dY's plane does not match the geometry")
    covered = min(OH * kh, H) * W
    whole = min(OW, W // 2)
    cdef int64_t[::1] bad = np.empty(planes, dtype=np.int64)
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        ok = 1
        for oh in range(OH):
            row = &dx[p, oh * kh * W]
            rows = min(kh, H - oh * kh)
            base = p * P + oh * kh * W
            if real is float:
                if not mt_maxpool_k2_f_grad(&dy[p, oh * OW], &indices[p, oh * OW], row, W, rows == 2, base, whole):
                    ok = 0
            else:
                if not mt_maxpool_k2_d_grad(&dy[p, oh * OW], &indices[p, oh * OW], row, W, rows == 2, base, whole):
                    ok = 0
            if whole < OW:
                if not _k2_edge_grad(dy[p, oh * OW + whole], indices[p, oh * OW + whole] - base, row, W, rows,
                                     2 * whole, W - 2 * whole):
                    ok = 0
            for c in range(2 * OW, W):
                row[c] = 0
                if rows == 2:
                    row[W + c] = 0
        if covered < P:
            memset(&dx[p, 0] + covered, 0, (P - covered) * sizeof(real))
        bad[p] = -1
        if not ok:
            _max_pool_grad_plane(&dy[p, 0], &indices[p, 0], &dx[p, 0], Q, P, p * P, False, 1, H, W, &bad[p])
    return _first_bad(bad, Q)


cdef inline int _k2_edge_grad(real g, int64_t at, real* r0, Py_ssize_t W, Py_ssize_t rows, Py_ssize_t col,
                              Py_ssize_t cols) noexcept nogil:
    """The gradient of one window cut by the input's end (see _k2_edge): its rows x cols taps
    from r0[col] get g where `at` (the index less the row's base) points, else 0.  Returns 0
    when `at` lies outside the window."""
    cdef Py_ssize_t a, b, k
    cdef int inside = 0
    for a in range(rows):
        for b in range(cols):
            k = a * W + col + b
            r0[k] = g if k == at else 0
            inside = inside | (k == at)
    return inside


# --------------------------------------------------------------------------- AveragePool
cdef void _avg_pool_plane(const real* x, real* y, Py_ssize_t H, Py_ssize_t W,
                          Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                          Py_ssize_t dd, Py_ssize_t dh, Py_ssize_t dw,
                          const int64_t* td, const int64_t* th, const int64_t* tw,
                          const double* inv_d, const double* inv_h, const double* inv_w) noexcept nogil:
    cdef Py_ssize_t od, oh, ow, a, b, c, pd, ph, row, q = 0
    cdef real acc
    for od in range(OD):
        for oh in range(OH):
            for ow in range(OW):
                acc = 0
                for a in range(td[OD + od], td[2 * OD + od]):
                    pd = td[od] + a * dd
                    for b in range(th[OH + oh], th[2 * OH + oh]):
                        ph = th[oh] + b * dh
                        row = (pd * H + ph) * W + tw[ow]
                        for c in range(tw[OW + ow], tw[2 * OW + ow]):
                            acc = acc + x[row + c * dw]
                y[q] = acc * <real>(inv_d[od] * inv_h[oh] * inv_w[ow])
                q = q + 1


def avg_pool(const real[:, ::1] x, real[:, ::1] y, tuple in3, tuple out3, tuple dil3,
             const int64_t[:, ::1] td, const int64_t[:, ::1] th, const int64_t[:, ::1] tw,
             const double[::1] inv_d, const double[::1] inv_h, const double[::1] inv_w,
             int num_threads):
    """y[p] = sum over each window of x[p], times the window's reciprocal count."""
    cdef Py_ssize_t planes = x.shape[0], P = x.shape[1], p
    cdef Py_ssize_t H = in3[1], W = in3[2], OD = out3[0], OH = out3[1], OW = out3[2]
    cdef Py_ssize_t dd = dil3[0], dh = dil3[1], dw = dil3[2]
    cdef int nt = _threads(planes * P, planes, num_threads)
    if planes == 0:
        return
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        _avg_pool_plane(&x[p, 0], &y[p, 0], H, W, OD, OH, OW, dd, dh, dw, &td[0, 0], &th[0, 0],
                        &tw[0, 0], &inv_d[0], &inv_h[0], &inv_w[0])


cdef void _avg_pool_grad_plane(const real* dy, real* dx, real* scaled, real* buf_w, real* buf_h,
                               real* saved, const real* scale, const Py_ssize_t* g, const int64_t* rd,
                               const int64_t* rh, const int64_t* rw) noexcept nogil:
    """One plane of AveragePoolGrad as three separable scatter passes (W, then H, then D).

    g holds, per axis a in (D, H, W): g[6a..6a+5] = in, out, kernel, stride, dilation, pad_begin,
    then g[18], g[19] the trivial flags of D and H.  r{d,h,w}[2t], [2t+1]: the output positions
    [lo, hi) whose tap t lands inside the input (precomputed: no divisions in here).
    scale: the reciprocal window count of every output position.  Per-thread buffers:
    scaled (OD, OH, OW), buf_w (OD, OH, W), buf_h (OD, H, W), saved (OD, OH, OW)."""
    cdef Py_ssize_t D = g[0], OD = g[1], kd = g[2], sd = g[3], dd = g[4], pd = g[5]
    cdef Py_ssize_t H = g[6], OH = g[7], kh = g[8], sh = g[9], dh = g[10], ph = g[11]
    cdef Py_ssize_t W = g[12], OW = g[13], kw = g[14], sw = g[15], dw = g[16], pw = g[17]
    cdef bint triv_d = g[18], triv_h = g[19]
    cdef Py_ssize_t t, lo, hi, off, r, o, k, first, last, rows = OD * OH, HW = H * W
    cdef real* dst
    cdef real* drow
    cdef const real* srow
    cdef const real* src
    for o in range(rows * OW):
        scaled[o] = dy[o] * scale[o]
    # pass W: scatter each window's share along W
    dst = dx if (triv_d and triv_h) else buf_w
    memset(dst, 0, rows * W * sizeof(real))
    for t in range(kw):
        off = t * dw - pw
        lo = rw[2 * t]
        hi = rw[2 * t + 1]
        if hi <= lo:
            continue
        if sw == 1 and W == OW and rows > 1:
            # Same pitch in and out: one long add over the plane, shifted by off.  The source
            # columns outside [lo, hi) would spill into the neighbouring rows, so they are
            # zeroed for this tap (saved and restored): adding 0 keeps the result exact.
            k = 0
            for o in range(lo):                 # column by column: few long loops
                for r in range(rows):
                    saved[k + r] = scaled[r * OW + o]
                    scaled[r * OW + o] = 0
                k = k + rows
            for o in range(hi, OW):
                for r in range(rows):
                    saved[k + r] = scaled[r * OW + o]
                    scaled[r * OW + o] = 0
                k = k + rows
            first = lo if off < 0 else 0
            last = rows * OW - (OW - hi if off > 0 else 0)
            _add(dst + first + off, scaled + first, last - first)
            k = 0
            for o in range(lo):
                for r in range(rows):
                    scaled[r * OW + o] = saved[k + r]
                k = k + rows
            for o in range(hi, OW):
                for r in range(rows):
                    scaled[r * OW + o] = saved[k + r]
                k = k + rows
        else:
            for r in range(rows):
                drow = dst + r * W + off
                srow = scaled + r * OW
                if sw == 1:
                    for o in range(lo, hi):
                        drow[o] = drow[o] + srow[o]
                else:
                    for o in range(lo, hi):
                        drow[o * sw] = drow[o * sw] + srow[o]
    src = dst
    # pass H: rows of W elements; with stride 1 the rows of one tap form one contiguous block
    if not triv_h:
        dst = dx if triv_d else buf_h
        memset(dst, 0, OD * HW * sizeof(real))
        for r in range(OD):
            for t in range(kh):
                off = t * dh - ph
                lo = rh[2 * t]
                hi = rh[2 * t + 1]
                if sh == 1:
                    if hi > lo:
                        _add(dst + r * HW + (lo + off) * W, src + (r * OH + lo) * W, (hi - lo) * W)
                else:
                    for o in range(lo, hi):
                        _add(dst + r * HW + (o * sh + off) * W, src + (r * OH + o) * W, W)
        src = dst
    # pass D: slabs of H * W elements (contiguous blocks again with stride 1)
    if not triv_d:
        memset(dx, 0, D * HW * sizeof(real))
        for t in range(kd):
            off = t * dd - pd
            lo = rd[2 * t]
            hi = rd[2 * t + 1]
            if sd == 1:
                if hi > lo:
                    _add(dx + (lo + off) * HW, src + lo * HW, (hi - lo) * HW)
            else:
                for o in range(lo, hi):
                    _add(dx + (o * sd + off) * HW, src + o * HW, HW)


def avg_pool_grad(const real[:, ::1] dy, real[:, ::1] dx, tuple geometry, tuple trivial,
                  const real[::1] scale, const int64_t[:, ::1] rd, const int64_t[:, ::1] rh,
                  const int64_t[:, ::1] rw, int num_threads):
    """dx[p] = each dy[p] value times its window's reciprocal count (`scale`, one per output
    position), added to every input element of the window (overlapping windows add up).
    geometry: per axis (D, H, W) the tuple (in, out, kernel, stride, dilation, pad_begin);
    trivial: per axis whether pooling leaves it alone; r{d,h,w}: (kernel, 2) output ranges
    [lo, hi) per tap (see _avg_pool_grad_plane)."""
    cdef Py_ssize_t g[21]
    cdef Py_ssize_t planes = dy.shape[0], p, a, i, tid
    cdef real* base
    cdef real[:, ::1] scratch
    cdef int nt
    for a in range(3):
        for i in range(6):
            g[6 * a + i] = geometry[a][i]
    g[18] = trivial[0]
    g[19] = trivial[1]
    g[20] = trivial[2]
    if dy.shape[1] != g[1] * g[7] * g[13] or dx.shape[1] != g[0] * g[6] * g[12] or dx.shape[0] != planes:
        raise ValueError("avg_pool_grad: buffer shapes disagree with the geometry")
    if scale.shape[0] != dy.shape[1] or rd.shape[0] != g[2] or rh.shape[0] != g[8] or rw.shape[0] != g[14]:
        raise ValueError("avg_pool_grad: scale or tap tables disagree with the geometry")
    if planes == 0 or dx.shape[1] == 0:
        return
    nt = _threads(planes * (dx.shape[1] + dy.shape[1]), planes, num_threads)
    # per-thread intermediates: scaled dY (OD, OH, OW), after W (OD, OH, W), after H (OD, H, W)
    cdef Py_ssize_t size_s = dy.shape[1], size_w = g[1] * g[7] * g[12], size_h = g[1] * g[6] * g[12]
    # buffers start GAP elements apart beyond their sizes so that no two share their address
    # modulo 4 KiB (4K aliasing stalls the shifted adds between them)
    cdef Py_ssize_t o1 = size_s + GAP, o2 = o1 + size_w + GAP, o3 = o2 + size_h + GAP
    scratch = np.empty((nt, o3 + size_s + GAP), dtype=np.float32 if real is float else np.float64)
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        tid = threadid()
        base = &scratch[tid, 0]
        _avg_pool_grad_plane(&dy[p, 0], &dx[p, 0], base, base + o1, base + o2, base + o3, &scale[0], g,
                             &rd[0, 0], &rh[0, 0], &rw[0, 0])


# --------------------------------------------------------------------------- AveragePool by rows
cdef enum:
    TAPS = 0        # along W: stride 1, shifted sums over a zero-margined row buffer
    WINDOWS = 1     # along W: dilation 1, each window one contiguous sum (forward)
    PAIRS = 2       # along W: kernel = stride = 2, no padding (forward)
    SPREAD = 1      # along W: kernel = stride, no padding or dilation (gradient)


cdef _check_rows(const Py_ssize_t[::1] ptr, const Py_ssize_t[::1] rows, Py_ssize_t n_src, str who):
    """The CSR row table: ptr non-decreasing from 0 to len(rows), every row below n_src."""
    cdef Py_ssize_t i
    if ptr.shape[0] < 2 or ptr[0] != 0 or ptr[ptr.shape[0] - 1] != rows.shape[0]:
        raise ValueError(f"{who}: malformed row table")
    for i in range(ptr.shape[0] - 1):
        if ptr[i + 1] < ptr[i]:
            raise ValueError(f"{who}: malformed row table")
    for i in range(rows.shape[0]):
        if rows[i] < 0 or rows[i] >= n_src:
            raise ValueError(f"{who}: row table points outside the plane")


def avg_pool_rows(const real[:, ::1] x, real[:, ::1] y, const real[::1] scale,
                  const Py_ssize_t[::1] ptr, const Py_ssize_t[::1] rows, Py_ssize_t W, Py_ssize_t OW,
                  int mode, Py_ssize_t lead, Py_ssize_t ext, const Py_ssize_t[:, ::1] wtab,
                  int num_threads):
    """AveragePool row by row.  Output row r (of OD * OH, OW wide) sums the input rows
    rows[ptr[r]:ptr[r + 1]] (of D * H, W wide) into a row buffer of ext elements at offset
    lead (or reads the input row itself when it is the only one and no margins are needed),
    then pools along W, times scale (every output position's reciprocal window count):
      TAPS     y[o] = sum over t of buf[o + wtab[0, t]], wtab[0, t] = t * dilation; the buffer
               has lead = pad_begin zeros before the row and ext - lead - W after it
      WINDOWS  y[o] = sum of buf[wtab[0, o] : wtab[1, o]] (the window clipped to the input)
      PAIRS    y[o] = buf[2 o] + buf[2 o + 1]"""
    cdef Py_ssize_t planes = x.shape[0], nrows = ptr.shape[0] - 1, p, r, k = wtab.shape[1]
    cdef int direct = lead == 0 and ext == W
    cdef real* buf
    cdef int nt
    if W < 1 or x.shape[1] % W or y.shape[0] != planes or y.shape[1] != nrows * OW \
            or scale.shape[0] != y.shape[1] or ext < lead + W:
        raise ValueError("avg_pool_rows: buffer shapes disagree with the geometry")
    _check_rows(ptr, rows, x.shape[1] // W, "avg_pool_rows")
    if (mode == TAPS and (wtab.shape[0] != 1 or k < 1 or OW + wtab[0, k - 1] > ext)) \
            or (mode == WINDOWS and (wtab.shape[0] != 2 or k != OW)) or (mode == PAIRS and 2 * OW > W) \
            or mode < TAPS or mode > PAIRS:
        raise ValueError("avg_pool_rows: the W table disagrees with the row buffer")
    if mode == WINDOWS:
        for r in range(OW):
            if wtab[0, r] < 0 or wtab[1, r] > W:
                raise ValueError("avg_pool_rows: a window leaves the row")
    if planes == 0 or OW == 0:
        return
    nt = _threads(planes * (x.shape[1] + y.shape[1]), planes, num_threads, MT_MIN_PARALLEL_STREAM)
    # per-thread plane buffers of nrows rows of ext; their margins stay zero (only
    # [lead, lead + W) of each row is ever written)
    scratch = np.zeros((nt, nrows * ext + GAP), dtype=np.float32 if real is float else np.float64)
    cdef real[:, ::1] sc = scratch
    cdef const Py_ssize_t* wt1 = &wtab[1, 0] if mode == WINDOWS else NULL
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        buf = &sc[threadid(), 0]
        if real is float:
            mt_avg_plane_f(&y[p, 0], &x[p, 0], buf, &ptr[0], &rows[0], nrows, W, OW, mode, lead, ext, direct,
                           &wtab[0, 0], wt1, k, &scale[0])
        else:
            mt_avg_plane_d(&y[p, 0], &x[p, 0], buf, &ptr[0], &rows[0], nrows, W, OW, mode, lead, ext, direct,
                           &wtab[0, 0], wt1, k, &scale[0])


def avg_pool_grad_rows(const real[:, ::1] dy, real[:, ::1] dx, const real[::1] weights,
                       const real[::1] col_weights, const Py_ssize_t[::1] ptr, const Py_ssize_t[::1] rows,
                       int mode, Py_ssize_t lead, Py_ssize_t ext, const Py_ssize_t[::1] shift,
                       Py_ssize_t kw, const real[::1] uniform, int num_threads):
    """AveragePoolGrad row by row, one store per dX element.  dX row r (of D * H, W wide)
    gathers the dY rows rows[ptr[r]:ptr[r + 1]] (of OD * OH, OW = len(col_weights) wide),
    each times its weights[] entry (the D and H reciprocal counts of that row), the sum times
    col_weights (the W reciprocal counts), into a row buffer at offset lead; then along W:
      TAPS    dx[w] = sum over t < kw of buf[lead + w + shift[t]], shift[t] = pad_begin -
              t * dilation; the buffer is zero outside [lead, lead + OW)
      SPREAD  dx[w] = buf[w // kw], 0 past the last window (lead = 0)
    A row no window reaches is zeroed.  uniform (TAPS, when every window counts the same; else
    empty): W copies of that count's reciprocal, applied after the taps instead."""
    cdef Py_ssize_t planes = dy.shape[0], nrows = ptr.shape[0] - 1, OW = col_weights.shape[0], W, p, t
    cdef real* buf
    cdef int nt
    W = dx.shape[1] // nrows if nrows > 0 else 0
    if nrows < 1 or dx.shape[1] != nrows * W or dx.shape[0] != planes or OW < 1 \
            or dy.shape[1] % OW or weights.shape[0] != rows.shape[0] or ext < lead + OW or kw < 1:
        raise ValueError("avg_pool_grad_rows: buffer shapes disagree with the geometry")
    _check_rows(ptr, rows, dy.shape[1] // OW, "avg_pool_grad_rows")
    if mode == TAPS:
        if shift.shape[0] != kw:
            raise ValueError("avg_pool_grad_rows: one shift per tap")
        for t in range(kw):
            if lead + shift[t] < 0 or lead + W + shift[t] > ext:
                raise ValueError("avg_pool_grad_rows: a tap leaves the row buffer")
    elif mode != SPREAD or lead != 0:
        raise ValueError("avg_pool_grad_rows: unknown mode")
    if uniform.shape[0] and (mode != TAPS or uniform.shape[0] != W):
        raise ValueError("avg_pool_grad_rows: a uniform scale needs the taps and one value per column")
    if planes == 0 or W == 0:
        return
    nt = _threads(planes * (dx.shape[1] + dy.shape[1]), planes, num_threads, MT_MIN_PARALLEL_STREAM)
    # per-thread plane buffers of nrows rows of ext; their margins stay zero (only
    # [lead, lead + OW) of each row is ever written)
    scratch = np.zeros((nt, nrows * ext + GAP), dtype=np.float32 if real is float else np.float64)
    cdef real[:, ::1] sc = scratch
    cdef const real* w = &weights[0] if weights.shape[0] else NULL
    cdef const Py_ssize_t* rw = &rows[0] if rows.shape[0] else NULL
    cdef const real* post = &uniform[0] if uniform.shape[0] else NULL
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        buf = &sc[threadid(), 0]
        if real is float:
            mt_avg_grad_plane_f(&dx[p, 0], &dy[p, 0], buf, &ptr[0], rw, w, nrows, W, OW, &col_weights[0],
                                mode == SPREAD, lead, ext, &shift[0], kw, post)
        else:
            mt_avg_grad_plane_d(&dx[p, 0], &dy[p, 0], buf, &ptr[0], rw, w, nrows, W, OW, &col_weights[0],
                                mode == SPREAD, lead, ext, &shift[0], kw, post)


# --------------------------------------------------------------------------- global pooling
def global_pool(const real[:, ::1] x, real[::1] y, bint is_max, int num_threads):
    """y[p] = max or mean of plane p."""
    cdef Py_ssize_t planes = x.shape[0], P = x.shape[1], p, i
    cdef real acc, v
    cdef int nt = _threads(planes * P, planes, num_threads)
    if P == 0:
        raise ValueError("global pooling of an empty spatial extent")
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        if is_max:
            acc = x[p, 0]
            for i in range(1, P):
                v = x[p, i]
                if v > acc or v != v:
                    acc = v
            y[p] = acc
        else:
            acc = 0
            for i in range(P):
                acc = acc + x[p, i]
            y[p] = acc / P


def global_avg_pool_grad(const real[::1] dy, real[:, ::1] dx, int num_threads):
    """dx[p, :] = dy[p] / plane size."""
    cdef Py_ssize_t planes = dx.shape[0], P = dx.shape[1], p, i
    cdef real v
    cdef int nt = _threads(planes * P, planes, num_threads)
    if P == 0:
        return
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        v = dy[p] / P
        for i in range(P):
            dx[p, i] = v


def global_avg_pool_grad_add(const real[::1] dy, const real[:, ::1] addend, real[:, ::1] dx, int num_threads):
    """dx[p, :] = addend[p, :] + dy[p] / plane size: global_avg_pool_grad's dX added to another
    gradient of the pooled tensor in the same pass (each term rounded as the two ops round it)."""
    cdef Py_ssize_t planes = dx.shape[0], P = dx.shape[1], p, i
    cdef real v
    cdef int nt = _threads(planes * P, planes, num_threads)
    if P == 0:
        return
    if dy.shape[0] != planes or addend.shape[0] != planes or addend.shape[1] != P:
        raise ValueError(f"global_avg_pool_grad_add: dy of {dy.shape[0]} planes, addend ({addend.shape[0]}, "
                         f"{addend.shape[1]}) for dx ({planes}, {P})")
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        v = dy[p] / P
        for i in range(P):
            dx[p, i] = addend[p, i] + v


def global_max_pool_grad(const real[::1] dy, const real[:, ::1] x, real[:, ::1] dx, int num_threads):
    """dx[p] = dy[p] at the first maximum of x[p] (as MaxPool picks it), zero elsewhere."""
    cdef Py_ssize_t planes = x.shape[0], P = x.shape[1], p, i, best
    cdef real acc, v
    cdef int nt = _threads(planes * P, planes, num_threads)
    if P == 0:
        return
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        acc = x[p, 0]
        best = 0
        for i in range(1, P):
            v = x[p, i]
            if v > acc or v != v:
                acc = v
                best = i
        for i in range(P):
            dx[p, i] = 0
        dx[p, best] = dy[p]
