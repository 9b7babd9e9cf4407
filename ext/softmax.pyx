# cython: language_level=3
"""Softmax / LogSoftmax and their gradients along one axis of a contiguous tensor viewed as
(outer, n, inner): element (o, j, i) sits at (o * n + j) * inner + i.  The coerced-to-2-D ONNX
form is the case inner == 1.  Rows are independent and processed in parallel."""
from cython.parallel cimport prange
from libc.math cimport exp, expf, log, logf

ctypedef fused real:
    float
    double


cdef inline real _exp(real v) noexcept nogil:
    if real is float:
        return expf(v)
    return exp(v)


cdef inline real _log(real v) noexcept nogil:
    if real is float:
        return logf(v)
    return log(v)


cdef inline int _threads(Py_ssize_t work, int num_threads) noexcept nogil:
    return num_threads if work >= 32768 else 1


def softmax(const real[::1] x, real[::1] out, Py_ssize_t outer, Py_ssize_t n, Py_ssize_t inner,
            bint log_softmax, int num_threads):
    """out = softmax(x) (or log_softmax) along the middle axis; subtracts the max for stability."""
    cdef Py_ssize_t row, o, i, j, base
    cdef real m, s, v
    for row in prange(outer * inner, nogil=True, schedule="static",
                      num_threads=_threads(outer * n * inner, num_threads)):
        o = row // inner
        i = row - o * inner
        base = o * n * inner + i
        m = x[base]
        for j in range(1, n):
            if x[base + j * inner] > m:
                m = x[base + j * inner]
        s = 0
        for j in range(n):
            v = _exp(x[base + j * inner] - m)
            s = s + v
            if not log_softmax:
                out[base + j * inner] = v
        if log_softmax:
            s = m + _log(s)
            for j in range(n):
                out[base + j * inner] = x[base + j * inner] - s
        else:
            s = 1 / s
            for j in range(n):
                out[base + j * inner] = out[base + j * inner] * s


def softmax_grad(const real[::1] dy, const real[::1] y, real[::1] out, Py_ssize_t outer,
                 Py_ssize_t n, Py_ssize_t inner, bint log_softmax, int num_threads):
    """Softmax: dX = Y * (dY - sum(Y * dY)); LogSoftmax: dX = dY - exp(Y) * sum(dY)."""
    cdef Py_ssize_t row, o, i, j, base, k
    cdef real s
    for row in prange(outer * inner, nogil=True, schedule="static",
                      num_threads=_threads(outer * n * inner, num_threads)):
        o = row // inner
        i = row - o * inner
        base = o * n * inner + i
        s = 0
        if log_softmax:
            for j in range(n):
                s = s + dy[base + j * inner]
            for j in range(n):
                k = base + j * inner
                out[k] = dy[k] - _exp(y[k]) * s
        else:
            for j in range(n):
                k = base + j * inner
                s = s + y[k] * dy[k]
            for j in range(n):
                k = base + j * inner
                out[k] = y[k] * (dy[k] - s)
