# cython: language_level=3
"""Elementwise activations and their gradients over flat contiguous buffers.

Each function takes 1-D views of equal length and writes into `out`; loops are parallel with
OpenMP when the tensor is large enough to pay for the threads."""
from cython.parallel cimport prange

ctypedef fused real:
    float
    double

cdef inline int _threads(Py_ssize_t n, int num_threads) noexcept nogil:
    """Below 32768 elements a parallel region costs more than it saves."""
    return num_threads if n >= 32768 else 1


def relu(const real[::1] x, real[::1] out, int num_threads):
    cdef Py_ssize_t i, n = x.shape[0]
    for i in prange(n, nogil=True, schedule="static", num_threads=_threads(n, num_threads)):
        out[i] = x[i] if x[i] > 0 else 0


def relu_grad(const real[::1] dy, const real[::1] x, real[::1] out, int num_threads):
    cdef Py_ssize_t i, n = x.shape[0]
    for i in prange(n, nogil=True, schedule="static", num_threads=_threads(n, num_threads)):
        out[i] = dy[i] if x[i] > 0 else 0
