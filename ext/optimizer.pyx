# cython: language_level=3
"""Optimizer updates over flat contiguous buffers, written in place.

These are the only kernels of minitrain that write into their inputs: the parameter and its
optimizer state are updated where they live, so a step allocates nothing.  The gradient is
read-only and multiplied by `grad_scale` (the global-norm clipping factor, 1 without clipping).
Reductions are split into fixed chunks summed in order, so results do not depend on the number
of threads (bitwise resume from a checkpoint relies on it).
"""
from cython.parallel cimport prange
from libc.math cimport sqrt, sqrtf
from libc.stdlib cimport free, malloc

ctypedef fused real:
    float
    double

DEF CHUNK = 8192


include "thresholds.pxi"


cdef inline int _threads(Py_ssize_t n, int num_threads) noexcept nogil:
    return threads_for(n, num_threads, MT_MIN_PARALLEL_UPDATE)


cdef inline real _sqrt(real v) noexcept nogil:
    if real is float:
        return sqrtf(v)
    return sqrt(v)


def squared_norm(const real[::1] g, int num_threads):
    """sum(g * g) in double, chunk by chunk in a fixed order."""
    cdef Py_ssize_t n = g.shape[0], chunks = (n + CHUNK - 1) // CHUNK, c, i, end
    cdef double total = 0, s
    cdef double *partial = <double *> malloc(max(chunks, 1) * sizeof(double))
    if partial == NULL:
        raise MemoryError()
    try:
        for c in prange(chunks, nogil=True, schedule="static", num_threads=_threads(n, num_threads)):
            s = 0
            end = min((c + 1) * CHUNK, n)
            for i in range(c * CHUNK, end):
                s = s + <double> g[i] * <double> g[i]
            partial[c] = s
        for c in range(chunks):
            total += partial[c]
    finally:
        free(partial)
    return total


def sgd_update(real[::1] w, const real[::1] g, real[::1] buf, double lr, double momentum,
               double weight_decay, double grad_scale, bint nesterov, int num_threads):
    """PyTorch's SGD: d = scale*g + wd*w; buf = momentum*buf + d; d = d + momentum*buf
    (nesterov) or buf; w -= lr*d.  `buf` is ignored (may be empty) when momentum is 0."""
    cdef Py_ssize_t i, n = w.shape[0]
    cdef real lr_ = <real> lr, mu = <real> momentum, wd = <real> weight_decay, sc = <real> grad_scale
    cdef real d, b
    cdef bint use_buf = momentum != 0
    for i in prange(n, nogil=True, schedule="static", num_threads=_threads(n, num_threads)):
        d = sc * g[i] + wd * w[i]
        if use_buf:
            b = mu * buf[i] + d
            buf[i] = b
            if nesterov:
                d = d + mu * b
            else:
                d = b
        w[i] = w[i] - lr_ * d


def adam_update(real[::1] w, const real[::1] g, real[::1] m, real[::1] v, double lr,
                double beta1, double beta2, double eps, double weight_decay, bint decoupled,
                double grad_scale, double bias1, double bias2, int num_threads):
    """PyTorch's Adam (decoupled=False: L2 decay added to the gradient) and AdamW
    (decoupled=True: w *= 1 - lr*wd before the update).  bias1/bias2 are 1 - beta^t."""
    cdef Py_ssize_t i, n = w.shape[0]
    cdef real b1 = <real> beta1, b2 = <real> beta2, e = <real> eps, sc = <real> grad_scale
    cdef real wd = <real> (0 if decoupled else weight_decay)
    cdef real shrink = <real> (1 - lr * weight_decay if decoupled else 1)
    cdef real step = <real> (lr / bias1), inv_sqrt_bias2 = <real> (1 / sqrt(bias2))
    cdef real d, mi, vi
    for i in prange(n, nogil=True, schedule="static", num_threads=_threads(n, num_threads)):
        d = sc * g[i] + wd * w[i]
        mi = b1 * m[i] + (1 - b1) * d
        vi = b2 * v[i] + (1 - b2) * d * d
        m[i] = mi
        v[i] = vi
        w[i] = w[i] * shrink - step * mi / (_sqrt(vi) * inv_sqrt_bias2 + e)
