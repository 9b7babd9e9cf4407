# cython: language_level=3
"""Softmax / LogSoftmax and their gradients along one axis of a contiguous tensor viewed as
(outer, n, inner): element (o, j, i) sits at (o * n + j) * inner + i.  The coerced-to-2-D ONNX
form (opsets 1-12) is the case inner == 1.

inner == 1: each row is contiguous; rows go to the threads and every pass over a row is a
vectorisable loop (the row stays in L1/L2 between passes).
inner > 1: a task is one `o` and a block of up to BLOCK consecutive `i`; the per-lane running
max and sums live in small stack arrays, and every loop runs over the contiguous `i` lanes.
Both subtract the max before exponentiating (numerically stable); float32 uses a clamped,
vectorisable exp, float64 uses libm.
With `stream` set (the caller decides, see minitrain/providers/cpu/streaming.py) the last pass
of contiguous gradient rows writes with non-temporal stores (ext/grad_stream.h)."""
from cython.parallel cimport parallel, prange
from libc.math cimport exp, log, logf

cdef extern from "fastmath.h":
    float mt_expf(float x) noexcept nogil

include "stream.pxi"

ctypedef fused real:
    float
    double

cdef enum:
    BLOCK = 64          # lanes of `inner` per task when inner > 1
    MIN_PARALLEL = 32768
    ROW_EXPS = 2048     # longest LogSoftmax gradient row whose exps fit the stack buffer

cdef enum:              # forms of a gradient row's last pass
    SOFTMAX = 0         # dX = Y * (dY - s)
    LOG_EXPS = 1        # dX = dY - exp(Y) * s, exp(Y) computed by the first pass
    LOG = 2             # the same, computing exp(Y)


cdef inline real _exp(real v) noexcept nogil:
    if real is float:
        return mt_expf(v)
    else:
        return exp(v)


cdef inline real _log(real v) noexcept nogil:
    if real is float:
        return logf(v)
    else:
        return log(v)


cdef inline int _threads(Py_ssize_t work, int num_threads) noexcept nogil:
    return num_threads if work >= MIN_PARALLEL else 1


# --------------------------------------------------------------------------- contiguous rows
cdef void _softmax_row(const real* x, real* y, Py_ssize_t n, bint log_softmax) noexcept nogil:
    cdef Py_ssize_t j
    cdef real m = x[0], s = 0, v
    for j in range(1, n):
        m = x[j] if x[j] > m else m
    if log_softmax:
        for j in range(n):
            s = s + _exp(x[j] - m)
        v = m + _log(s)
        for j in range(n):
            y[j] = x[j] - v
    else:
        for j in range(n):
            v = _exp(x[j] - m)
            y[j] = v
            s = s + v
        v = 1 / s
        for j in range(n):
            y[j] = y[j] * v


cdef void _softmax_grad_out(const real* dy, const real* w, real* dx, Py_ssize_t n, real s,
                            int form) noexcept nogil:
    """The gradient's last pass over a row, given s = sum(Y * dY) (Softmax) or sum(dY)
    (LogSoftmax); w is Y, or exp(Y) when the first pass kept it (LOG_EXPS)."""
    cdef Py_ssize_t j
    if form == SOFTMAX:
        for j in range(n):
            dx[j] = w[j] * (dy[j] - s)
    elif form == LOG_EXPS:
        for j in range(n):
            dx[j] = dy[j] - w[j] * s
    else:
        for j in range(n):
            dx[j] = dy[j] - _exp(w[j]) * s


cdef void _softmax_grad_row(const real* dy, const real* y, real* dx, Py_ssize_t n,
                            bint log_softmax, bint stream) noexcept nogil:
    """One contiguous row: s in a first pass, then dX.  LogSoftmax rows of up to ROW_EXPS
    elements keep exp(Y) from the first pass in a stack buffer, so the exps overlap the loads
    of both inputs and the last pass is as light as Softmax's.  `stream` writes that last
    pass's whole cache lines with streaming stores (not for longer LogSoftmax rows, whose
    last pass computes the exps)."""
    cdef Py_ssize_t j, done
    cdef real s = 0
    cdef real exps[ROW_EXPS]
    cdef const real* w = y
    cdef int form = SOFTMAX, kind
    if not log_softmax:
        for j in range(n):
            s = s + y[j] * dy[j]
    elif n <= ROW_EXPS:
        for j in range(n):
            s = s + dy[j]
            exps[j] = _exp(y[j])
        w, form = exps, LOG_EXPS
    else:
        for j in range(n):
            s = s + dy[j]
        form = LOG
    if not stream or form == LOG:
        _softmax_grad_out(dy, w, dx, n, s, form)
        return
    j = mt_stream_head(dx, n, sizeof(real))
    _softmax_grad_out(dy, w, dx, j, s, form)
    kind = MT_GRAD_SOFTMAX if form == SOFTMAX else MT_GRAD_LOG_SOFTMAX
    if real is float:
        done = j + mt_grad_stream_f(kind, dy + j, w + j, dx + j, n - j, s)
    else:
        done = j + mt_grad_stream_d(kind, dy + j, w + j, dx + j, n - j, s)
    _softmax_grad_out(dy + done, w + done, dx + done, n - done, s, form)


# --------------------------------------------------------------------------- strided axis
cdef void _softmax_block(const real* x, real* y, Py_ssize_t n, Py_ssize_t inner, Py_ssize_t w,
                         bint log_softmax) noexcept nogil:
    """Lanes x[j * inner + l] for j < n, l < w (w <= BLOCK)."""
    cdef real m[BLOCK]
    cdef real s[BLOCK]
    cdef Py_ssize_t j, l
    cdef const real* xr
    cdef real* yr
    for l in range(w):
        m[l] = x[l]
        s[l] = 0
    for j in range(1, n):
        xr = x + j * inner
        for l in range(w):
            m[l] = xr[l] if xr[l] > m[l] else m[l]
    for j in range(n):
        xr = x + j * inner
        yr = y + j * inner
        if log_softmax:
            for l in range(w):
                s[l] = s[l] + _exp(xr[l] - m[l])
        else:
            for l in range(w):
                yr[l] = _exp(xr[l] - m[l])
                s[l] = s[l] + yr[l]
    for l in range(w):
        s[l] = m[l] + _log(s[l]) if log_softmax else 1 / s[l]
    for j in range(n):
        xr = x + j * inner
        yr = y + j * inner
        if log_softmax:
            for l in range(w):
                yr[l] = xr[l] - s[l]
        else:
            for l in range(w):
                yr[l] = yr[l] * s[l]


cdef void _softmax_grad_block(const real* dy, const real* y, real* dx, Py_ssize_t n,
                              Py_ssize_t inner, Py_ssize_t w, bint log_softmax) noexcept nogil:
    cdef real s[BLOCK]
    cdef Py_ssize_t j, l, k
    for l in range(w):
        s[l] = 0
    for j in range(n):
        k = j * inner
        if log_softmax:
            for l in range(w):
                s[l] = s[l] + dy[k + l]
        else:
            for l in range(w):
                s[l] = s[l] + y[k + l] * dy[k + l]
    for j in range(n):
        k = j * inner
        if log_softmax:
            for l in range(w):
                dx[k + l] = dy[k + l] - _exp(y[k + l]) * s[l]
        else:
            for l in range(w):
                dx[k + l] = y[k + l] * (dy[k + l] - s[l])


# --------------------------------------------------------------------------- drivers
cdef void _softmax(const real* x, real* y, Py_ssize_t outer, Py_ssize_t n, Py_ssize_t inner,
                   bint log_softmax, int nt) noexcept nogil:
    cdef Py_ssize_t row, task, o, b, nb, base
    if inner == 1:
        for row in prange(outer, schedule="static", num_threads=nt):
            _softmax_row(x + row * n, y + row * n, n, log_softmax)
    else:
        nb = (inner + BLOCK - 1) // BLOCK
        for task in prange(outer * nb, schedule="static", num_threads=nt):
            o = task // nb
            b = (task - o * nb) * BLOCK
            base = o * n * inner + b
            _softmax_block(x + base, y + base, n, inner, min(<Py_ssize_t>BLOCK, inner - b), log_softmax)


cdef void _softmax_grad(const real* dy, const real* y, real* dx, Py_ssize_t outer, Py_ssize_t n,
                        Py_ssize_t inner, bint log_softmax, bint stream, int nt) noexcept nogil:
    cdef Py_ssize_t row, task, o, b, nb, base
    if inner == 1:
        with parallel(num_threads=nt):
            for row in prange(outer, schedule="static"):
                _softmax_grad_row(dy + row * n, y + row * n, dx + row * n, n, log_softmax, stream)
            if stream:
                mt_stream_fence()
    else:
        nb = (inner + BLOCK - 1) // BLOCK
        for task in prange(outer * nb, schedule="static", num_threads=nt):
            o = task // nb
            b = (task - o * nb) * BLOCK
            base = o * n * inner + b
            _softmax_grad_block(dy + base, y + base, dx + base, n, inner,
                                min(<Py_ssize_t>BLOCK, inner - b), log_softmax)


def _check(str what, Py_ssize_t size, Py_ssize_t outer, Py_ssize_t n, Py_ssize_t inner, buffers):
    for b in buffers:
        if b != size:
            raise ValueError(f"{what}: buffers of {size} and {b} elements")
    if outer < 0 or n < 0 or inner < 0 or outer * n * inner != size or (size and (n < 1 or inner < 1)):
        raise ValueError(f"{what}: layout ({outer}, {n}, {inner}) does not cover {size} elements")


def softmax(const real[::1] x, real[::1] out, Py_ssize_t outer, Py_ssize_t n, Py_ssize_t inner,
            bint log_softmax, int num_threads):
    """out = softmax(x) (or log_softmax) along the middle axis of (outer, n, inner)."""
    _check("softmax", x.shape[0], outer, n, inner, (out.shape[0],))
    if x.shape[0] == 0:
        return
    cdef int nt = _threads(x.shape[0], num_threads)
    with nogil:
        _softmax(&x[0], &out[0], outer, n, inner, log_softmax, nt)


def softmax_grad(const real[::1] dy, const real[::1] y, real[::1] out, Py_ssize_t outer,
                 Py_ssize_t n, Py_ssize_t inner, bint log_softmax, int num_threads,
                 bint stream=False):
    """Softmax: dX = Y * (dY - sum(Y * dY)); LogSoftmax: dX = dY - exp(Y) * sum(dY); `stream`
    writes contiguous rows (inner == 1; LogSoftmax: up to ROW_EXPS long) with non-temporal
    stores."""
    _check("softmax gradient", dy.shape[0], outer, n, inner, (y.shape[0], out.shape[0]))
    if dy.shape[0] == 0:
        return
    cdef int nt = _threads(dy.shape[0], num_threads)
    with nogil:
        _softmax_grad(&dy[0], &y[0], &out[0], outer, n, inner, log_softmax, stream, nt)
