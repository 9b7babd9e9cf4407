# cython: language_level=3
"""Where over flat contiguous buffers: out[i] = x[i] if condition[i] else y[i], where x or y
may hold a single element that stands for every position (the scalar zero of the gradients of
Clip and Where).  Both sides are read unconditionally, so each loop is a branch-free,
vectorisable select; OpenMP threads take chunks of CHUNK elements.
"""
from cython.parallel cimport prange

include "thresholds.pxi"

ctypedef fused real:
    float
    double

cdef enum:
    CHUNK = 16384       # elements per OpenMP task


cdef void _select(const unsigned char* condition, const real* x, const real* y, real* out, Py_ssize_t n,
                  bint x_scalar, bint y_scalar) noexcept nogil:
    cdef Py_ssize_t i
    cdef real a, b
    if x_scalar and y_scalar:
        a, b = x[0], y[0]
        for i in range(n):
            out[i] = a if condition[i] else b
    elif x_scalar:
        a = x[0]
        for i in range(n):
            out[i] = a if condition[i] else y[i]
    elif y_scalar:
        b = y[0]
        for i in range(n):
            out[i] = x[i] if condition[i] else b
    else:
        for i in range(n):
            out[i] = x[i] if condition[i] else y[i]


def where(const unsigned char[::1] condition, const real[::1] x, const real[::1] y, real[::1] out, int num_threads):
    """out = x where condition else y; x and y hold out's element count, or one element."""
    cdef Py_ssize_t n = out.shape[0], c, start
    if condition.shape[0] != n or x.shape[0] not in (1, n) or y.shape[0] not in (1, n):
        raise ValueError(f"where: buffers of {condition.shape[0]}, {x.shape[0]}, {y.shape[0]} and {n} elements")
    if n == 0:
        return
    cdef bint x_scalar = x.shape[0] == 1, y_scalar = y.shape[0] == 1
    cdef Py_ssize_t chunks = (n + CHUNK - 1) // CHUNK
    for c in prange(chunks, nogil=True, schedule="static",
                    num_threads=threads_for(n, num_threads, MT_MIN_PARALLEL_ELEMENTWISE)):
        start = c * CHUNK
        _select(&condition[start], &x[0] if x_scalar else &x[start], &y[0] if y_scalar else &y[start], &out[start],
                min(<Py_ssize_t>CHUNK, n - start), x_scalar, y_scalar)
