# cython: language_level=3
"""Convolution by im2col / col2im (vol2col in 3D) and BLAS GEMM, for 1D, 2D and 3D.

Every rank is handled as 3D, a missing leading spatial axis having size 1.  The geometry
(see minitrain/ops/conv_geometry.py) is passed as an int64 array `geo`:

    geo = [G, C, M, ID, IH, IW, OD, OH, OW, KD, KH, KW, SD, SH, SW, DD, DH, DW, PD, PH, PW]

C: image channels per group, M: column channels per group, I*: image dims, O*: column dims,
K*: kernel, S*: strides, D*: dilations, P*: begin pads (any sign; column position o reads image
position o * S - P + k * D, zero outside the image).  Tensors are flat C-contiguous buffers:
image (N, G*C, ID, IH, IW), columns (N, G*M, OD, OH, OW), weight (G*M, C, KD, KH, KW).

The column matrix of one (sample, group) is K x P with K = C*KD*KH*KW and P = OD*OH*OW; it is
built a tile of T columns at a time into per-thread scratch, so that it stays in cache while
the GEMM consumes it.  Work items are (sample, group, tile), run under OpenMP (`parallel`
true: each thread calls a single-threaded BLAS; the caller sets BLAS to one thread) or in
turn (`parallel` false: the caller lets BLAS use the threads).  BLAS is column-major:
row-major C = A B is computed as the column-major product C^T = B^T A^T.
"""
from cython.parallel cimport prange, threadid
from libc.string cimport memset, memcpy
from scipy.linalg.cython_blas cimport sgemm, dgemm

include "thresholds.pxi"

ctypedef fused real:
    float
    double


cdef struct Geo:
    Py_ssize_t G, C, M
    Py_ssize_t ID, IH, IW, OD, OH, OW
    Py_ssize_t KD, KH, KW, SD, SH, SW, DD, DH, DW, PD, PH, PW
    Py_ssize_t img, col, K    # image plane size, column plane size P, rows of the column matrix


cdef Geo _geo(const long long[::1] g):
    cdef Geo r
    r.G, r.C, r.M = g[0], g[1], g[2]
    r.ID, r.IH, r.IW, r.OD, r.OH, r.OW = g[3], g[4], g[5], g[6], g[7], g[8]
    r.KD, r.KH, r.KW, r.SD, r.SH, r.SW = g[9], g[10], g[11], g[12], g[13], g[14]
    r.DD, r.DH, r.DW, r.PD, r.PH, r.PW = g[15], g[16], g[17], g[18], g[19], g[20]
    r.img = r.ID * r.IH * r.IW
    r.col = r.OD * r.OH * r.OW
    r.K = r.C * r.KD * r.KH * r.KW
    return r


cdef inline void gemm_rm(char ta, char tb, int m, int n, int k, real alpha, const real* a, int lda,
                         const real* b, int ldb, real beta, real* c, int ldc) noexcept nogil:
    """Row-major C (m x n) = alpha op(A) op(B) + beta C."""
    if real is float:
        sgemm(&tb, &ta, &n, &m, &k, &alpha, <float*>b, &ldb, <float*>a, &lda, &beta, c, &ldc)
    else:
        dgemm(&tb, &ta, &n, &m, &k, &alpha, <double*>b, &ldb, <double*>a, &lda, &beta, c, &ldc)


cdef inline Py_ssize_t _valid_lo(Py_ssize_t off, Py_ssize_t s) noexcept nogil:
    """Smallest o >= 0 with o * s + off >= 0."""
    if off >= 0:
        return 0
    return (-off + s - 1) // s


cdef inline Py_ssize_t _valid_hi(Py_ssize_t off, Py_ssize_t s, Py_ssize_t size) noexcept nogil:
    """One past the largest o with o * s + off < size (0 when there is none)."""
    if size - 1 - off < 0:
        return 0
    return (size - 1 - off) // s + 1


cdef inline void _segment(const Geo* g, Py_ssize_t j, Py_ssize_t j1, Py_ssize_t* q, Py_ssize_t* ow0,
                          Py_ssize_t* ow1) noexcept nogil:
    """The run of columns from j on that lies in one output row q = od * OH + oh: [ow0, ow1)."""
    q[0] = j // g.OW
    ow0[0] = j - q[0] * g.OW
    ow1[0] = g.OW if g.OW - ow0[0] < j1 - j else ow0[0] + (j1 - j)


cdef void im2col_tile(const real* img, real* col, Py_ssize_t ldcol, const Geo* g,
                      Py_ssize_t j0, Py_ssize_t j1) noexcept nogil:
    """col[r, j - j0] for rows r = (c, kd, kh, kw) and columns j in [j0, j1) of one (n, group).
    Runs are short (one output row), so the copies are plain loops, not libc calls."""
    cdef Py_ssize_t c, kd, kh, kw, j, q, od, oh, ow0, ow1, lo, hi, ow, idd, ih, off
    cdef real* rows
    cdef real* out
    cdef const real* src
    for c in range(g.C):
        for kd in range(g.KD):
            for kh in range(g.KH):
                rows = col + ((c * g.KD + kd) * g.KH + kh) * g.KW * ldcol - j0
                j = j0
                while j < j1:
                    _segment(g, j, j1, &q, &ow0, &ow1)
                    od = q // g.OH
                    oh = q - od * g.OH
                    idd = od * g.SD - g.PD + kd * g.DD
                    ih = oh * g.SH - g.PH + kh * g.DH
                    if idd < 0 or idd >= g.ID or ih < 0 or ih >= g.IH:
                        for kw in range(g.KW):
                            out = rows + kw * ldcol + j - ow0
                            for ow in range(ow0, ow1):
                                out[ow] = 0
                    else:
                        src = img + ((c * g.ID + idd) * g.IH + ih) * g.IW
                        for kw in range(g.KW):
                            out = rows + kw * ldcol + j - ow0
                            off = kw * g.DW - g.PW
                            lo = _valid_lo(off, g.SW)
                            hi = _valid_hi(off, g.SW, g.IW)
                            if lo < ow0:
                                lo = ow0
                            if hi > ow1:
                                hi = ow1
                            if hi < lo:
                                hi = lo
                            for ow in range(ow0, lo):
                                out[ow] = 0
                            if g.SW == 1:
                                for ow in range(lo, hi):
                                    out[ow] = src[ow + off]
                            else:
                                for ow in range(lo, hi):
                                    out[ow] = src[ow * g.SW + off]
                            for ow in range(hi, ow1):
                                out[ow] = 0
                    j += ow1 - ow0


cdef void col2im_tile(const real* col, Py_ssize_t ldcol, real* img, const Geo* g,
                      Py_ssize_t j0, Py_ssize_t j1) noexcept nogil:
    """The adjoint of im2col_tile: img[...] += col[r, j - j0]."""
    cdef Py_ssize_t c, kd, kh, kw, j, q, od, oh, ow0, ow1, lo, hi, ow, idd, ih, off
    cdef const real* rows
    cdef const real* inp
    cdef real* dst
    for c in range(g.C):
        for kd in range(g.KD):
            for kh in range(g.KH):
                rows = col + ((c * g.KD + kd) * g.KH + kh) * g.KW * ldcol - j0
                j = j0
                while j < j1:
                    _segment(g, j, j1, &q, &ow0, &ow1)
                    od = q // g.OH
                    oh = q - od * g.OH
                    idd = od * g.SD - g.PD + kd * g.DD
                    ih = oh * g.SH - g.PH + kh * g.DH
                    if idd >= 0 and idd < g.ID and ih >= 0 and ih < g.IH:
                        dst = img + ((c * g.ID + idd) * g.IH + ih) * g.IW
                        for kw in range(g.KW):
                            inp = rows + kw * ldcol + j - ow0
                            off = kw * g.DW - g.PW
                            lo = _valid_lo(off, g.SW)
                            hi = _valid_hi(off, g.SW, g.IW)
                            if lo < ow0:
                                lo = ow0
                            if hi > ow1:
                                hi = ow1
                            if g.SW == 1:
                                for ow in range(lo, hi):
                                    dst[ow + off] += inp[ow]
                            else:
                                for ow in range(lo, hi):
                                    dst[ow * g.SW + off] += inp[ow]
                    j += ow1 - ow0


cdef struct TileItem:
    Py_ssize_t n, gi, j0, j1


cdef inline TileItem _tile_item(Py_ssize_t it, Py_ssize_t ntiles, Py_ssize_t T, const Geo* g) noexcept nogil:
    """Work item it = (sample n, group gi, tile): its columns [j0, j1).  (A struct result: values
    assigned in a prange body are thread-private, values written through pointers are not.)"""
    cdef TileItem r
    cdef Py_ssize_t t = it % ntiles
    r.gi = (it // ntiles) % g.G
    r.n = it // (ntiles * g.G)
    r.j0 = t * T
    r.j1 = r.j0 + T
    if r.j1 > g.col:
        r.j1 = g.col
    return r


cdef inline Py_ssize_t _ldcol(const Geo* g, bint direct, Py_ssize_t j0, Py_ssize_t j1) noexcept nogil:
    """Leading dimension of the column matrix of columns [j0, j1) (see _columns)."""
    return g.col if direct else j1 - j0


cdef inline real* _columns(const real* xg, real* scratch, const Geo* g, bint direct, Py_ssize_t j0,
                           Py_ssize_t j1) noexcept nogil:
    """The column matrix of columns [j0, j1) of image block xg: the image itself for a 1x1
    convolution, else its im2col tile in scratch (leading dimension: _ldcol)."""
    if direct:
        return <real*>xg + j0
    im2col_tile(xg, scratch, j1 - j0, g, j0, j1)
    return scratch


cdef inline int _pointwise(const Geo* g) noexcept nogil:
    """1x1, stride 1, no padding: the column matrix is the image itself (P == image plane)."""
    return (g.KD == 1 and g.KH == 1 and g.KW == 1 and g.SD == 1 and g.SH == 1 and g.SW == 1
            and g.PD == 0 and g.PH == 0 and g.PW == 0 and g.ID == g.OD and g.IH == g.OH and g.IW == g.OW)


def forward(const real[::1] x, const real[::1] w, const real[::1] bias, real[::1] y,
            const long long[::1] geo, Py_ssize_t N, Py_ssize_t T, real[:, ::1] scratch,
            bint parallel, int num_threads):
    """y (N, G*M, cols) = W (*) x (N, G*C, image) [+ bias (G*M,), when bias is non-empty]."""
    cdef Geo g = _geo(geo)
    cdef Py_ssize_t ntiles = (g.col + T - 1) // T
    cdef Py_ssize_t items = N * g.G * ntiles
    cdef Py_ssize_t it, n, gi, j0, j1, m, j, ldcol
    cdef TileItem item
    cdef bint direct = _pointwise(&g)
    cdef bint has_bias = bias.shape[0] > 0
    cdef int tid
    cdef real beta
    cdef real* col
    cdef real* yt
    cdef const real* xg
    for it in prange(items, nogil=True, schedule="static", num_threads=num_threads if parallel else 1):
        tid = threadid()
        item = _tile_item(it, ntiles, T, &g)
        n, gi, j0, j1 = item.n, item.gi, item.j0, item.j1
        ldcol = _ldcol(&g, direct, j0, j1)
        col = _columns(&x[0] + (n * g.G + gi) * g.C * g.img, &scratch[tid, 0], &g, direct, j0, j1)
        yt = &y[0] + (n * g.G + gi) * g.M * g.col + j0
        beta = 0
        if has_bias:
            beta = 1
            for m in range(g.M):
                for j in range(j1 - j0):
                    yt[m * g.col + j] = bias[gi * g.M + m]
        gemm_rm(c'N', c'N', <int>g.M, <int>(j1 - j0), <int>g.K, <real>1, &w[0] + gi * g.M * g.K, <int>g.K,
                col, <int>ldcol, beta, yt, <int>g.col)


def backward_data(const real[::1] dy, const real[::1] w, const real[::1] bias, real[::1] dx,
                  const long long[::1] geo, Py_ssize_t N, Py_ssize_t T, real[:, ::1] scratch,
                  bint parallel, int num_threads):
    """dx (N, G*C, image) = col2im(W^T dy) [+ bias (G*C,)]: the data gradient of a convolution,
    and the forward of a transposed one.  Items are (sample, group): each owns its dx block."""
    cdef Geo g = _geo(geo)
    cdef Py_ssize_t items = N * g.G
    cdef Py_ssize_t it, n, gi, j0, j1, c, i, ldcol
    cdef bint direct = _pointwise(&g)
    cdef bint has_bias = bias.shape[0] > 0
    cdef int tid
    cdef real* col
    cdef real* dxg
    cdef const real* dyg
    for it in prange(items, nogil=True, schedule="static", num_threads=num_threads if parallel else 1):
        tid = threadid()
        gi = it % g.G
        n = it // g.G
        dxg = &dx[0] + (n * g.G + gi) * g.C * g.img
        dyg = &dy[0] + (n * g.G + gi) * g.M * g.col
        if direct:
            gemm_rm(c'T', c'N', <int>g.K, <int>g.col, <int>g.M, <real>1, &w[0] + gi * g.M * g.K, <int>g.K,
                    dyg, <int>g.col, <real>0, dxg, <int>g.col)
        else:
            memset(dxg, 0, g.C * g.img * sizeof(real))
            col = &scratch[tid, 0]
            j0 = 0
            while j0 < g.col:
                j1 = j0 + T
                if j1 > g.col:
                    j1 = g.col
                ldcol = j1 - j0
                gemm_rm(c'T', c'N', <int>g.K, <int>ldcol, <int>g.M, <real>1, &w[0] + gi * g.M * g.K, <int>g.K,
                        dyg + j0, <int>g.col, <real>0, col, <int>ldcol)
                col2im_tile(col, ldcol, dxg, &g, j0, j1)
                j0 = j1
        if has_bias:
            for c in range(g.C):
                for i in range(g.img):
                    dxg[c * g.img + i] += bias[gi * g.C + c]


def backward_weight(const real[::1] dy, const real[::1] x, real[:, ::1] dw_acc,
                    const long long[::1] geo, Py_ssize_t N, Py_ssize_t T, real[:, ::1] scratch,
                    bint parallel, int num_threads):
    """dw_acc[thread] (G*M*K) += dy (N, G*M, cols) . im2col(x)^T, one accumulator per thread
    (zeroed by the caller, summed by the caller)."""
    cdef Geo g = _geo(geo)
    cdef Py_ssize_t ntiles = (g.col + T - 1) // T
    cdef Py_ssize_t items = N * g.G * ntiles
    cdef Py_ssize_t it, n, gi, j0, j1, ldcol
    cdef TileItem item
    cdef bint direct = _pointwise(&g)
    cdef int tid
    cdef real* col
    cdef const real* xg
    for it in prange(items, nogil=True, schedule="static", num_threads=num_threads if parallel else 1):
        tid = threadid()
        item = _tile_item(it, ntiles, T, &g)
        n, gi, j0, j1 = item.n, item.gi, item.j0, item.j1
        ldcol = _ldcol(&g, direct, j0, j1)
        col = _columns(&x[0] + (n * g.G + gi) * g.C * g.img, &scratch[tid, 0], &g, direct, j0, j1)
        gemm_rm(c'N', c'T', <int>g.M, <int>g.K, <int>(j1 - j0), <real>1,
                &dy[0] + (n * g.G + gi) * g.M * g.col + j0, <int>g.col, col, <int>ldcol,
                <real>1, &dw_acc[tid, 0] + gi * g.M * g.K, <int>g.K)


def sum_rows(const real[:, ::1] acc, real[::1] out, int num_threads):
    """out[i] = sum over rows of acc[:, i] (the reduction of per-thread accumulators)."""
    cdef Py_ssize_t i, t, R = acc.shape[0], L = acc.shape[1]
    cdef real s
    for i in prange(L, nogil=True, schedule="static", num_threads=threads_for(L, num_threads, MT_MIN_PARALLEL_REDUCE)):
        s = acc[0, i]
        for t in range(1, R):
            s = s + acc[t, i]
        out[i] = s


def channel_sums(const real[:, :, ::1] dy, real[::1] out, int num_threads):
    """out[c] = sum of dy[n, c, :] over n: the bias gradient (accumulated in double)."""
    cdef Py_ssize_t N = dy.shape[0], C = dy.shape[1], P = dy.shape[2]
    cdef Py_ssize_t c, n, i
    cdef double s
    cdef real part
    for c in prange(C, nogil=True, schedule="static",
                    num_threads=threads_for(N * C * P, num_threads, MT_MIN_PARALLEL_ELEMENTWISE)):
        s = 0
        for n in range(N):
            part = 0
            for i in range(P):
                part = part + dy[n, c, i]
            s = s + part
        out[c] = <real>s

