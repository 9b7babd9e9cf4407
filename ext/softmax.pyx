# cython: language_level=3
"""Softmax / LogSoftmax and their gradients along one axis of a contiguous tensor viewed as
(outer, n, inner): element (o, j, i) sits at (o * n + j) * inner + i.  The coerced-to-2-D ONNX
form (opsets 1-12) is the case inner == 1.

inner == 1: each row is contiguous; rows go to the threads and every pass over a row is a
vectorisable loop (the row stays in L1/L2 between passes).  The gradients give each thread one
block of rows and pipeline them: a row's last pass alternates, chunk by chunk, with the next
row's first (streamed or not).
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
    float _barrier_f "MT_ASSOC_BARRIER" (float x) noexcept nogil
    double _barrier_d "MT_ASSOC_BARRIER" (double x) noexcept nogil

include "stream.pxi"
include "thresholds.pxi"

ctypedef fused real:
    float
    double

cdef enum:
    BLOCK = 64          # lanes of `inner` per task when inner > 1
    ROW_EXPS = 2048     # longest LogSoftmax gradient row whose exps fit the stack buffer
    SUM_CHUNK = 256     # elements a gradient row's sum takes at a time (_softmax_grad_sum)

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
    return threads_for(work, num_threads, MT_MIN_PARALLEL_ELEMENTWISE)


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


cdef inline int _row_form(Py_ssize_t n, bint log_softmax) noexcept nogil:
    """The last pass's form for rows of n: LogSoftmax keeps its exps when they fit ROW_EXPS."""
    return SOFTMAX if not log_softmax else LOG_EXPS if n <= ROW_EXPS else LOG


cdef real _softmax_grad_part(const real* dy, const real* y, real* exps, Py_ssize_t n,
                             int form) noexcept nogil:
    """sum(Y * dY) (SOFTMAX) or sum(dY) over n elements, keeping exp(Y) in exps (LOG_EXPS), so
    the exps overlap the loads of both inputs and the last pass is as light as Softmax's."""
    cdef Py_ssize_t j
    cdef real s = 0
    if form == SOFTMAX:
        for j in range(n):
            s = s + y[j] * dy[j]
    elif form == LOG_EXPS:
        for j in range(n):
            s = s + dy[j]
            exps[j] = _exp(y[j])
    else:
        for j in range(n):
            s = s + dy[j]
    return s


cdef inline real _add_part(real s, real part) noexcept nogil:
    """s + part, kept in this order under -ffast-math (fastmath.h's barrier)."""
    if real is float:
        return s + _barrier_f(part)
    else:
        return s + _barrier_d(part)


cdef real _softmax_grad_sum(const real* dy, const real* y, real* exps, Py_ssize_t n,
                            int form) noexcept nogil:
    """A row's first pass: _softmax_grad_part over SUM_CHUNK elements at a time, the parts
    added in order (behind fastmath.h's reassociation barrier, GCC 12+).  The pipelined rows
    sum the next row chunk by chunk the same way, so the first row of a thread's block and the
    others get the same bits: results do not depend on the thread count (tested)."""
    cdef Py_ssize_t k, c
    cdef real s = 0
    for k in range((n + SUM_CHUNK - 1) // SUM_CHUNK):
        c = k * SUM_CHUNK
        s = _add_part(s, _softmax_grad_part(dy + c, y + c, exps + c if form == LOG_EXPS else NULL,
                                            min(<Py_ssize_t>SUM_CHUNK, n - c), form))
    return s


cdef void _softmax_grad_write(const real* dy, const real* w, real* dx, Py_ssize_t n, real s,
                              int form, bint stream) noexcept nogil:
    """_softmax_grad_out; with `stream`, dX's whole cache lines are written with streaming stores
    and the partial lines at both ends with the plain loop (no line is half streamed).  Rows of
    LogSoftmax over ROW_EXPS, whose last pass computes the exps, never stream."""
    cdef Py_ssize_t head, done
    cdef int kind = MT_GRAD_SOFTMAX if form == SOFTMAX else MT_GRAD_LOG_SOFTMAX
    if not stream or form == LOG:
        _softmax_grad_out(dy, w, dx, n, s, form)
        return
    head = mt_stream_head(dx, n, sizeof(real))
    _softmax_grad_out(dy, w, dx, head, s, form)
    if real is float:
        done = head + mt_grad_stream_f(kind, dy + head, w + head, dx + head, n - head, s)
    else:
        done = head + mt_grad_stream_d(kind, dy + head, w + head, dx + head, n - head, s)
    _softmax_grad_out(dy + done, w + done, dx + done, n - done, s, form)


cdef void _softmax_grad_rows(const real* dy, const real* y, real* dx, Py_ssize_t n,
                             Py_ssize_t rows, bint log_softmax, bint stream) noexcept nogil:
    """`rows` consecutive contiguous rows, pipelined: SUM_CHUNK elements at a time, a row's
    last pass (its inputs in L1) alternates with the next row's first pass (from memory or a
    farther cache), so those loads never wait for a whole last pass (docs/measurements.md,
    "Streaming stores", has what it gained)."""
    cdef Py_ssize_t r, k, c, m
    cdef real exps[2 * ROW_EXPS]          # this row's exps and the next row's (LOG_EXPS)
    cdef int form = _row_form(n, log_softmax)
    cdef real s = _softmax_grad_sum(dy, y, exps, n, form), s_next
    cdef const real* w
    cdef real* e_next
    for r in range(rows):
        w = &exps[(r % 2) * ROW_EXPS] if form == LOG_EXPS else y + r * n
        e_next = &exps[((r + 1) % 2) * ROW_EXPS]
        s_next = 0
        for k in range((n + SUM_CHUNK - 1) // SUM_CHUNK):
            c = k * SUM_CHUNK
            m = min(<Py_ssize_t>SUM_CHUNK, n - c)
            if r + 1 < rows:
                s_next = _add_part(s_next, _softmax_grad_part(
                    dy + (r + 1) * n + c, y + (r + 1) * n + c, e_next + c if form == LOG_EXPS else NULL, m, form))
            _softmax_grad_write(dy + r * n + c, w + c, dx + r * n + c, m, s, form, stream)
        s = s_next


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
    cdef Py_ssize_t task, o, b, nb, base
    if inner == 1:              # one block of consecutive rows per thread, pipelined
        with parallel(num_threads=nt):
            for task in prange(nt, schedule="static"):
                o = outer * task // nt
                b = outer * (task + 1) // nt
                if b > o:
                    _softmax_grad_rows(dy + o * n, y + o * n, dx + o * n, n, b - o, log_softmax, stream)
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
