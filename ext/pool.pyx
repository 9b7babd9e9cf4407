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
from libc.string cimport memcpy, memset

import numpy as np

cdef extern from *:
    """
    #include <string.h>
    #define MT_PREFETCH(p) __builtin_prefetch((const void*)(p), 0, 3)
    /* Short row loops with restrict pointers: no aliasing checks or loop versioning, which
       otherwise cost more than the 32-element rows of a typical pooling plane. */
    static inline void mt_mul_row_f(float* __restrict o, const float* __restrict a,
                                    const float* __restrict b, Py_ssize_t n) {
        for (Py_ssize_t i = 0; i < n; i++) o[i] = a[i] * b[i];
    }
    static inline void mt_mul_row_d(double* __restrict o, const double* __restrict a,
                                    const double* __restrict b, Py_ssize_t n) {
        for (Py_ssize_t i = 0; i < n; i++) o[i] = a[i] * b[i];
    }
    #define MT_SUM_TAPS(NAME, T)                                                           \
    static void NAME(T* __restrict out, const T* __restrict src, const Py_ssize_t* shift,      \
                     Py_ssize_t k, Py_ssize_t n) {                                             \
        const Py_ssize_t s0 = shift[0];                                                        \
        if (k == 1) { for (Py_ssize_t j = 0; j < n; j++) out[j] = src[j + s0]; return; }       \
        const Py_ssize_t s1 = shift[1];                                                        \
        if (k == 2) { for (Py_ssize_t j = 0; j < n; j++) out[j] = src[j + s0] + src[j + s1]; return; } \
        const Py_ssize_t s2 = shift[2];                                                        \
        if (k == 3) {                                                                          \
            for (Py_ssize_t j = 0; j < n; j++) out[j] = src[j + s0] + src[j + s1] + src[j + s2]; \
            return;                                                                            \
        }                                                                                      \
        for (Py_ssize_t j = 0; j < n; j++) out[j] = src[j + s0] + src[j + s1] + src[j + s2];   \
        for (Py_ssize_t t = 3; t < k; t++) {                                                   \
            const Py_ssize_t st = shift[t];                                                    \
            for (Py_ssize_t j = 0; j < n; j++) out[j] += src[j + st];                          \
        }                                                                                      \
    }
    /* out[j] = sum over t < k of src[j + shift[t]]: out and src are distinct buffers */
    MT_SUM_TAPS(mt_sum_taps_f, float)
    MT_SUM_TAPS(mt_sum_taps_d, double)
    """
    void MT_PREFETCH(const void* p) noexcept nogil
    void mt_sum_taps_f(float* out, const float* src, const Py_ssize_t* shift, Py_ssize_t k, Py_ssize_t n) noexcept nogil
    void mt_sum_taps_d(double* out, const double* src, const Py_ssize_t* shift, Py_ssize_t k, Py_ssize_t n) noexcept nogil
    void mt_mul_row_f(float* o, const float* a, const float* b, Py_ssize_t n) noexcept nogil
    void mt_mul_row_d(double* o, const double* a, const double* b, Py_ssize_t n) noexcept nogil

ctypedef fused real:
    float
    double

cdef enum:
    MIN_PARALLEL = 16384
    GAP = 80        # elements between per-thread buffers (see avg_pool_grad)


cdef inline int _threads(Py_ssize_t work, Py_ssize_t planes, int num_threads) noexcept nogil:
    if work < MIN_PARALLEL or planes < 2:
        return 1
    return <int>min(<Py_ssize_t>num_threads, planes)


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


cdef inline void _sum_taps(real* out, const real* src, const Py_ssize_t* shift, Py_ssize_t k,
                           Py_ssize_t n) noexcept nogil:
    """out[j] = sum over t < k of src[j + shift[t]], for j < n (src may be read before its
    pointer: the caller keeps j + shift[t] inside the buffer).  One store per element."""
    if real is float:
        mt_sum_taps_f(out, src, shift, k, n)
    else:
        mt_sum_taps_d(out, src, shift, k, n)


cdef void _gather_pass(real* out, const real* src, Py_ssize_t size, Py_ssize_t pitch,
                       const Py_ssize_t* shift, Py_ssize_t k) noexcept nogil:
    """One stride-1 axis of AveragePoolGrad over a whole padded buffer: out[J] = sum_t
    src[J + shift[t] * pitch].  Positions whose taps would leave the buffer are margins."""
    cdef Py_ssize_t t, lo = 0, hi = size, s
    cdef Py_ssize_t flat[64]
    for t in range(k):
        s = shift[t] * pitch
        flat[t] = s
        if -s > lo:
            lo = -s
        if size - s < hi:
            hi = size - s
    if hi > lo:
        _sum_taps(out + lo, src + lo, flat, k, hi - lo)


def avg_pool_grad_stride1(const real[:, ::1] dy, real[:, ::1] dx, tuple geometry, tuple trivial,
                          const real[::1] scale, int num_threads):
    """AveragePoolGrad when every pooled axis has stride 1 (overlapping windows), as gathers.

    Per plane, the scaled dY is written into a zero-margined buffer (margins L = (k-1)d - pb
    before and R = in + pb - out after each axis, so every tap of a valid position lands in
    its own row, slab, or a zero margin); then each pooled axis is one flat pass over the whole
    buffer, dX[x] = sum_t S[x + pb - t d] with one store per element; the valid region is
    copied out last.  Margins of the scaled buffer are zeroed once per thread and never
    written.  geometry: per axis (D, H, W) (in, out, kernel, stride, dilation, pad_begin)."""
    cdef Py_ssize_t n[3]
    cdef Py_ssize_t m[3]
    cdef Py_ssize_t kk[3]
    cdef Py_ssize_t lm[3]
    cdef Py_ssize_t ext[3]
    cdef Py_ssize_t shifts[3][64]
    cdef bint triv[3]
    cdef Py_ssize_t a, t, planes = dy.shape[0], p, tid, size, r, w, rows_in, rows_out
    cdef Py_ssize_t pitch_h, pitch_d, od, oh, d, h
    cdef real* buf
    cdef real* s_pad
    cdef real* cur
    cdef real* nxt
    cdef real* tmp
    cdef const real* drow
    cdef const real* srow
    cdef real* orow
    cdef int nt
    for a in range(3):
        size_in, size_out, kernel, stride, dilation, pad_begin = geometry[a]
        if stride != 1 or kernel > 64:
            raise ValueError("avg_pool_grad_stride1: needs stride 1 and kernel <= 64 on every axis")
        n[a] = size_in
        m[a] = size_out
        kk[a] = kernel
        triv[a] = trivial[a]
        lm[a] = max(0, (kernel - 1) * dilation - pad_begin)
        ext[a] = lm[a] + size_out + max(0, size_in + pad_begin - size_out)
        for t in range(kernel):
            shifts[a][t] = pad_begin - t * dilation
    if dy.shape[1] != m[0] * m[1] * m[2] or dx.shape[1] != n[0] * n[1] * n[2] or dx.shape[0] != planes \
            or scale.shape[0] != dy.shape[1]:
        raise ValueError("avg_pool_grad_stride1: buffer shapes disagree with the geometry")
    if planes == 0 or dx.shape[1] == 0:
        return
    size = ext[0] * ext[1] * ext[2]
    pitch_h = ext[2]
    pitch_d = ext[1] * ext[2]
    nt = _threads(planes * (dx.shape[1] + dy.shape[1]), planes, num_threads)
    cdef Py_ssize_t stride_buf = 3 * size + 3 * GAP
    scratch = np.zeros((nt, stride_buf), dtype=np.float32 if real is float else np.float64)
    cdef real[:, ::1] sc = scratch
    for p in prange(planes, nogil=True, schedule="static", num_threads=nt):
        tid = threadid()
        buf = &sc[tid, 0]
        s_pad = buf
        if p + 1 < planes:       # the next plane's dY, while this one is in flight
            for w in range(0, dy.shape[1], 16):
                MT_PREFETCH(&dy[p + 1, w])
        # scaled dY into the interior of the zero-margined buffer
        for od in range(m[0]):
            for oh in range(m[1]):
                drow = &dy[p, 0] + (od * m[1] + oh) * m[2]
                srow = &scale[0] + (od * m[1] + oh) * m[2]
                orow = s_pad + ((od + lm[0]) * ext[1] + oh + lm[1]) * ext[2] + lm[2]
                if real is float:
                    mt_mul_row_f(orow, drow, srow, m[2])
                else:
                    mt_mul_row_d(orow, drow, srow, m[2])
        cur = s_pad
        nxt = buf + size + GAP
        tmp = buf + 2 * (size + GAP)
        if not triv[2]:
            _gather_pass(nxt, cur, size, 1, &shifts[2][0], kk[2])
            cur = nxt
            nxt = tmp
        if not triv[1]:
            _gather_pass(nxt, cur, size, pitch_h, &shifts[1][0], kk[1])
            tmp = cur if cur != s_pad else tmp
            cur = nxt
            nxt = tmp
        if not triv[0]:
            _gather_pass(nxt, cur, size, pitch_d, &shifts[0][0], kk[0])
            cur = nxt
        # the valid region out
        for d in range(n[0]):
            for h in range(n[1]):
                srow = cur + ((d + lm[0]) * ext[1] + h + lm[1]) * ext[2] + lm[2]
                orow = &dx[p, 0] + (d * n[1] + h) * n[2]
                memcpy(orow, srow, n[2] * sizeof(real))


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
