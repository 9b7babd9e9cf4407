# cython: language_level=3
"""Pooling kernels: MaxPool (with indices), AveragePool, their gradients, and global pooling.

Every tensor is contiguous and viewed as (planes, plane) with planes = N * C.  Spatial shapes
are always 3-D (D, H, W): 1-D and 2-D pooling pass leading axes of size 1 with kernel 1.
Window geometry comes from Python (minitrain/ops/pool_geometry.py) as per-axis tables
`tab[a]` of shape (3, out_a): row 0 the input coordinate where window o starts, rows 1 and 2
the first and one-past-last tap of that window that land inside the input; taps sit at
start + t * dilation.  Average pooling also gets per-axis reciprocal window counts `inv[a]`
(the count of a box window is the product of per-axis counts).

Planes are independent and split over OpenMP threads, so no two threads write the same
element.  MaxPoolGrad checks every index against its own plane before writing and reports
the first bad one per plane instead of writing out of bounds.
"""
from cython.parallel cimport prange, threadid
from libc.stdint cimport int64_t
from libc.string cimport memset

import numpy as np

ctypedef fused real:
    float
    double

cdef enum:
    MIN_PARALLEL = 16384


cdef inline int _threads(Py_ssize_t work, Py_ssize_t planes, int num_threads) noexcept nogil:
    if work < MIN_PARALLEL or planes < 2:
        return 1
    return <int>min(<Py_ssize_t>num_threads, planes)


cdef inline void _add(real* dst, const real* src, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        dst[i] = dst[i] + src[i]


cdef inline void _tap_range(Py_ssize_t off, Py_ssize_t stride, Py_ssize_t n_in, Py_ssize_t n_out,
                            Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """Output positions o in [lo, hi) whose tap lands on o * stride + off inside [0, n_in)."""
    cdef Py_ssize_t a = 0, b
    if off < 0:
        a = (-off + stride - 1) // stride
    if n_in - 1 - off < 0:
        b = 0
    else:
        b = (n_in - 1 - off) // stride + 1
    if b > n_out:
        b = n_out
    lo[0] = a
    hi[0] = b if b > a else a


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


def max_pool_grad(const real[:, ::1] dy, const int64_t[:, ::1] indices, real[:, ::1] dx,
                  bint col_major, tuple in3, int64_t[::1] bad, int num_threads):
    """dx[p] = scatter-add of dy[p] at indices[p] (flattened over the whole tensor, so plane p
    owns [p * plane, (p + 1) * plane)).  An index outside its plane is skipped and the first
    such position of plane p is stored in bad[p] (-1 when none); nothing is written out of
    bounds."""
    cdef Py_ssize_t planes = dy.shape[0], Q = dy.shape[1], P = dx.shape[1], p
    cdef Py_ssize_t D = in3[0], H = in3[1], W = in3[2]
    cdef int nt = _threads(planes * (P + Q), planes, num_threads)
    if indices.shape[0] != planes or indices.shape[1] != Q or dx.shape[0] != planes or bad.shape[0] != planes:
        raise ValueError("max_pool_grad: buffer shapes disagree")
    if D * H * W != P:
        raise ValueError("max_pool_grad: spatial shape does not match the plane size")
    if planes == 0 or P == 0:
        return
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        _max_pool_grad_plane(&dy[p, 0] if Q else NULL, &indices[p, 0] if Q else NULL, &dx[p, 0], Q, P,
                             p * P, col_major, D, H, W, &bad[p])


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


cdef void _avg_pool_grad_plane(const real* dy, real* dx, real* buf_w, real* buf_h, real* row,
                               const Py_ssize_t* g, const double* inv_d, const double* inv_h,
                               const double* inv_w) noexcept nogil:
    """One plane of AveragePoolGrad as three separable scatter passes (W, then H, then D).

    g holds, per axis a in (D, H, W): g[6a..6a+5] = in, out, kernel, stride, dilation, pad_begin,
    and g[18..20] the trivial flags.  Intermediates stay in the per-thread buffers:
    buf_w (OD, OH, W), buf_h (OD, H, W)."""
    cdef Py_ssize_t D = g[0], OD = g[1], kd = g[2], sd = g[3], ddl = g[4], pd = g[5]
    cdef Py_ssize_t H = g[6], OH = g[7], kh = g[8], sh = g[9], dhl = g[10], ph = g[11]
    cdef Py_ssize_t W = g[12], OW = g[13], kw = g[14], sw = g[15], dwl = g[16], pw = g[17]
    cdef bint triv_d = g[18], triv_h = g[19]
    cdef Py_ssize_t od, oh, ow, t, lo, hi, off, r, o
    cdef real scale
    cdef real* dst
    cdef real* drow
    cdef const real* src
    # pass W: scale by the reciprocal counts, scatter each window's share along W
    dst = dx if (triv_d and triv_h) else buf_w
    for od in range(OD):
        for oh in range(OH):
            r = od * OH + oh
            scale = <real>(inv_d[od] * inv_h[oh])
            for ow in range(OW):
                row[ow] = dy[r * OW + ow] * (scale * <real>inv_w[ow])
            drow = dst + r * W
            memset(drow, 0, W * sizeof(real))
            for t in range(kw):
                off = t * dwl - pw
                _tap_range(off, sw, W, OW, &lo, &hi)
                if sw == 1:
                    for o in range(lo, hi):
                        drow[o + off] = drow[o + off] + row[o]
                else:
                    for o in range(lo, hi):
                        drow[o * sw + off] = drow[o * sw + off] + row[o]
    src = dst
    # pass H: rows of W elements
    if not triv_h:
        dst = dx if triv_d else buf_h
        for od in range(OD):
            memset(dst + od * H * W, 0, H * W * sizeof(real))
            for t in range(kh):
                off = t * dhl - ph
                _tap_range(off, sh, H, OH, &lo, &hi)
                for o in range(lo, hi):
                    _add(dst + (od * H + o * sh + off) * W, src + (od * OH + o) * W, W)
        src = dst
    # pass D: slabs of H * W elements
    if not triv_d:
        memset(dx, 0, D * H * W * sizeof(real))
        for t in range(kd):
            off = t * ddl - pd
            _tap_range(off, sd, D, OD, &lo, &hi)
            for o in range(lo, hi):
                _add(dx + (o * sd + off) * H * W, src + o * H * W, H * W)


def avg_pool_grad(const real[:, ::1] dy, real[:, ::1] dx, tuple geometry, tuple trivial,
                  const double[::1] inv_d, const double[::1] inv_h, const double[::1] inv_w,
                  int num_threads):
    """dx[p] = each dy[p] value times its window's reciprocal count, added to every input
    element of the window (overlapping windows add up).  geometry: per axis (D, H, W) the tuple
    (in, out, kernel, stride, dilation, pad_begin); trivial: per axis whether it is untouched."""
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
    if planes == 0 or dx.shape[1] == 0:
        return
    nt = _threads(planes * (dx.shape[1] + dy.shape[1]), planes, num_threads)
    # per-thread intermediates: (OD, OH, W), (OD, H, W) and one scaled row of OW
    cdef Py_ssize_t size_w = g[1] * g[7] * g[12], size_h = g[1] * g[6] * g[12], size_row = g[13]
    scratch = np.empty((nt, size_w + size_h + size_row + 1), dtype=np.float32 if real is float else np.float64)
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        tid = threadid()
        base = &scratch[tid, 0]
        _avg_pool_grad_plane(&dy[p, 0], &dx[p, 0], base, base + size_w, base + size_w + size_h, g,
                             &inv_d[0], &inv_h[0], &inv_w[0])


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
