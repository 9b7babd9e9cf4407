# cython: language_level=3
"""Elementwise activations and their gradients over flat contiguous buffers.

Every function takes 1-D contiguous views of equal length (checked by the caller) and writes
into `out`.  The work is cut into chunks of CHUNK elements handed to OpenMP threads; each chunk
runs a plain pointer loop that the C compiler vectorises.  float32 uses the branch-free,
vectorisable exp/tanh below (clamped, so large |x| never overflows); float64 uses libm.
With `stream` set (the caller decides, see minitrain/providers/cpu/streaming.py) the
memory-bound gradients write dx with non-temporal stores (ext/grad_stream.h).
"""
from cython.parallel cimport parallel, prange
from libc.math cimport exp, fabsf, tanh

cdef extern from "fastmath.h":
    float mt_expf(float x) noexcept nogil
    float mt_tanhf(float x) noexcept nogil

include "stream.pxi"
include "thresholds.pxi"

ctypedef fused real:
    float
    double

cdef enum:
    CHUNK = 16384       # elements per OpenMP task


cdef inline real _sigmoid(real v) noexcept nogil:
    """1 / (1 + exp(-v)) from e = exp(-|v|) <= 1, so nothing overflows and very negative v
    gives exactly 0 (float: a select, so the loop still vectorises)."""
    cdef real e
    if real is float:
        e = mt_expf(-fabsf(v))
        return (<real>1 if v >= 0 else e) / (<real>1 + e)
    elif v >= 0:
        return 1 / (1 + exp(-v))
    else:
        e = exp(v)
        return e / (1 + e)


cdef inline real _tanh(real v) noexcept nogil:
    if real is float:
        return mt_tanhf(v)
    else:
        return tanh(v)


cdef inline int _threads(Py_ssize_t n, int num_threads) noexcept nogil:
    return threads_for(n, num_threads, MT_MIN_PARALLEL_ELEMENTWISE)


# --------------------------------------------------------------------------- chunk loops
# Each takes raw pointers to one chunk; `op` selects the function (a switch outside the loop
# keeps every inner loop a simple vectorisable body).

cdef enum:
    RELU = 0
    SIGMOID = 1
    TANH = 2
    LEAKY = 3
    QUICKGELU = 4


cdef void _forward_chunk(int op, const real* x, real* y, Py_ssize_t n, real alpha) noexcept nogil:
    cdef Py_ssize_t i
    if op == RELU:            # NaN fails x <= 0 and passes through, as in ONNX
        for i in range(n):
            y[i] = 0 if x[i] <= 0 else x[i]
    elif op == SIGMOID:
        for i in range(n):
            y[i] = _sigmoid(x[i])
    elif op == TANH:
        for i in range(n):
            y[i] = _tanh(x[i])
    elif op == LEAKY:
        for i in range(n):
            y[i] = x[i] if x[i] >= 0 else alpha * x[i]
    elif op == QUICKGELU:
        for i in range(n):
            y[i] = x[i] * _sigmoid(alpha * x[i])


cdef void _backward_chunk(int op, const real* dy, const real* v, real* dx, Py_ssize_t n,
                          real alpha) noexcept nogil:
    cdef Py_ssize_t i
    cdef real s, one = 1      # a typed 1: a bare literal would make C compute in double
    if op == RELU:            # v = X
        for i in range(n):
            dx[i] = dy[i] if v[i] > 0 else 0
    elif op == SIGMOID:       # v = Y
        for i in range(n):
            dx[i] = dy[i] * v[i] * (one - v[i])
    elif op == TANH:          # v = Y
        for i in range(n):
            dx[i] = dy[i] * (one - v[i] * v[i])
    elif op == LEAKY:         # v = Y (or X when alpha <= 0, see ops/activation.py)
        for i in range(n):
            dx[i] = dy[i] if v[i] > 0 else alpha * dy[i]
    elif op == QUICKGELU:     # v = X
        for i in range(n):
            s = _sigmoid(alpha * v[i])
            dx[i] = dy[i] * s * (one + alpha * v[i] * (one - s))


cdef Py_ssize_t _backward_vectors(int op, const real* dy, const real* v, real* dx, Py_ssize_t n,
                                  real alpha) noexcept nogil:
    """_backward_chunk over the whole cache lines of dx (which starts on one) with streaming
    stores (ext/grad_stream.h); returns how many elements it wrote (0 for an op that never
    streams)."""
    cdef int kind = (MT_GRAD_RELU if op == RELU else MT_GRAD_SIGMOID if op == SIGMOID else
                     MT_GRAD_TANH if op == TANH else MT_GRAD_LEAKY_RELU if op == LEAKY else MT_GRAD_NONE)
    if real is float:
        return mt_grad_stream_f(kind, dy, v, dx, n, alpha)
    else:
        return mt_grad_stream_d(kind, dy, v, dx, n, alpha)


cdef void _backward_streamed(int op, const real* dy, const real* v, real* dx, Py_ssize_t n,
                             real alpha) noexcept nogil:
    """_backward_chunk with dx's whole cache lines streamed; the head before the first and the
    tail after the last take the plain loop."""
    cdef Py_ssize_t head = mt_stream_head(dx, n, sizeof(real)), done
    _backward_chunk(op, dy, v, dx, head, alpha)
    done = head + _backward_vectors(op, dy + head, v + head, dx + head, n - head, alpha)
    _backward_chunk(op, dy + done, v + done, dx + done, n - done, alpha)


cdef void _forward(int op, const real[::1] x, real[::1] y, real alpha, int num_threads) noexcept nogil:
    cdef Py_ssize_t n = x.shape[0], c, start, stop
    cdef Py_ssize_t chunks = (n + CHUNK - 1) // CHUNK
    for c in prange(chunks, schedule="static", num_threads=_threads(n, num_threads)):
        start = c * CHUNK
        stop = min(start + CHUNK, n)
        _forward_chunk(op, &x[start], &y[start], stop - start, alpha)


cdef void _backward(int op, const real[::1] dy, const real[::1] v, real[::1] dx, real alpha,
                    bint stream, int num_threads) noexcept nogil:
    cdef Py_ssize_t n = dy.shape[0], c, start, stop
    cdef Py_ssize_t chunks = (n + CHUNK - 1) // CHUNK
    with parallel(num_threads=_threads(n, num_threads)):
        for c in prange(chunks, schedule="static"):
            start = c * CHUNK
            stop = min(start + CHUNK, n)
            if stream:
                _backward_streamed(op, &dy[start], &v[start], &dx[start], stop - start, alpha)
            else:
                _backward_chunk(op, &dy[start], &v[start], &dx[start], stop - start, alpha)
        if stream:
            mt_stream_fence()


# --------------------------------------------------------------------------- Python entry points
_OPS = {"relu": RELU, "sigmoid": SIGMOID, "tanh": TANH, "leaky_relu": LEAKY, "quick_gelu": QUICKGELU}


def forward(str name, const real[::1] x, real[::1] y, double alpha, int num_threads):
    """y = f(x) for f in relu, sigmoid, tanh, leaky_relu (alpha), quick_gelu (alpha)."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"activation {name}: buffers of {x.shape[0]} and {y.shape[0]} elements")
    cdef int op = _OPS[name]
    if x.shape[0]:
        with nogil:
            _forward(op, x, y, <real>alpha, num_threads)


def backward(str name, const real[::1] dy, const real[::1] v, real[::1] dx, double alpha,
             int num_threads, bint stream=False):
    """dx = f'(dy, v) for the gradient kernels; v is X or Y as each gradient op defines;
    `stream` writes dx with non-temporal stores."""
    if not dy.shape[0] == v.shape[0] == dx.shape[0]:
        raise ValueError(f"activation gradient {name}: buffers of {dy.shape[0]}, {v.shape[0]} "
                         f"and {dx.shape[0]} elements")
    cdef int op = _OPS[name]
    if dy.shape[0]:
        with nogil:
            _backward(op, dy, v, dx, <real>alpha, stream, num_threads)
