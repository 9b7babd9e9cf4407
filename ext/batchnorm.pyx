# cython: language_level=3
"""Batch normalisation over a contiguous (N, C, D) buffer: element (n, c, d) sits at
(n * C + c) * D + d, D the product of the spatial dims (1 for (N, C) input).

Per-channel sums run serially inside each channel (channels in parallel), in double, so the
results do not depend on the thread count.  Elementwise passes run over the N * C planes in
parallel.
"""
from cython.parallel cimport prange

ctypedef fused real:
    float
    double


include "thresholds.pxi"


cdef inline int _threads(Py_ssize_t work, int num_threads) noexcept nogil:
    return threads_for(work, num_threads, MT_MIN_PARALLEL_ELEMENTWISE)


def channel_stats(const real[::1] x, Py_ssize_t n, Py_ssize_t c, Py_ssize_t d,
                  double[::1] mean, double[::1] var, int num_threads):
    """Per-channel mean and biased variance (two passes)."""
    cdef Py_ssize_t ch, i, j, base
    cdef double s, diff, count = <double> (n * d)
    for ch in prange(c, nogil=True, schedule="static", num_threads=_threads(n * c * d, num_threads)):
        s = 0
        for i in range(n):
            base = (i * c + ch) * d
            for j in range(d):
                s = s + x[base + j]
        s = s / count
        mean[ch] = s
        diff = 0
        for i in range(n):
            base = (i * c + ch) * d
            for j in range(d):
                diff = diff + (x[base + j] - s) * (x[base + j] - s)
        var[ch] = diff / count


def normalize(const real[::1] x, real[::1] y, Py_ssize_t n, Py_ssize_t c, Py_ssize_t d,
              const real[::1] mul, const real[::1] add, int num_threads):
    """y = x * mul[c] + add[c] (the affine form of (x - mean) * inv_std * scale + B)."""
    cdef Py_ssize_t plane, ch, j, base
    cdef real a, b
    for plane in prange(n * c, nogil=True, schedule="static", num_threads=_threads(n * c * d, num_threads)):
        ch = plane % c
        a = mul[ch]
        b = add[ch]
        base = plane * d
        for j in range(d):
            y[base + j] = x[base + j] * a + b


def grad_sums(const real[::1] dy, const real[::1] x, Py_ssize_t n, Py_ssize_t c, Py_ssize_t d,
              const real[::1] mean, const real[::1] inv_std, double[::1] dbias, double[::1] dscale,
              int num_threads):
    """dbias[c] = sum(dy), dscale[c] = sum(dy * (x - mean) * inv_std)."""
    cdef Py_ssize_t ch, i, j, base
    cdef double sb, sx, m
    for ch in prange(c, nogil=True, schedule="static", num_threads=_threads(n * c * d, num_threads)):
        sb = 0
        sx = 0
        m = mean[ch]
        for i in range(n):
            base = (i * c + ch) * d
            for j in range(d):
                sb = sb + dy[base + j]
                sx = sx + dy[base + j] * (x[base + j] - m)
        dbias[ch] = sb
        dscale[ch] = sx * inv_std[ch]


def grad_input(const real[::1] dy, const real[::1] x, real[::1] dx, Py_ssize_t n, Py_ssize_t c,
               Py_ssize_t d, const real[::1] mean, const real[::1] k_dy, const real[::1] k_x,
               const real[::1] k_0, int num_threads):
    """dx = k_dy[c] * dy + k_x[c] * (x - mean[c]) + k_0[c] (training: the batch-statistics
    terms are in k_x and k_0; inference: k_x = k_0 = 0)."""
    cdef Py_ssize_t plane, ch, j, base
    cdef real a, b, e, m
    for plane in prange(n * c, nogil=True, schedule="static", num_threads=_threads(n * c * d, num_threads)):
        ch = plane % c
        a = k_dy[ch]
        b = k_x[ch]
        e = k_0[ch]
        m = mean[ch]
        base = plane * d
        for j in range(d):
            dx[base + j] = a * dy[base + j] + b * (x[base + j] - m) + e
