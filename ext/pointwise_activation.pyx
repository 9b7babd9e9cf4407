# cython: language_level=3
"""The pointwise activations of exported CNNs and their gradients over flat contiguous buffers
(minitrain/ops/pointwise_activation.py has the formulas; cuda/pointwise_activation.cu the same
ones on the GPU), erf (the Erf of Gelu as opsets before 20 export it) and clip (ReLU6 as Clip)
with its gradient (the fused ClipGrad), and Gelu of X plus a bias of X's last dim (BiasGelu) with
its gradient (BiasGeluGrad_dX), in flat loops over spans of whole rows.
Each op takes two parameters a and b: alpha and beta (HardSigmoid), alpha and gamma (Selu),
alpha (Elu), the bounds (clip), none (the others).

As ext/activation.pyx does, the work is cut into chunks of CHUNK elements handed to OpenMP
threads, each a plain loop; float32 takes the vectorisable exp of fastmath.h and erf and log1p
of fastmath_extra.h, float64 libm.  A comparison with NaN is false, so NaN takes the branch the CUDA kernels take.
"""
import numpy as np

from cython.parallel cimport prange
from libc.math cimport erf, exp, expm1, fabs, fabsf, log1p, sqrt

cdef extern from "fastmath.h":
    float mt_expf(float x) noexcept nogil

cdef extern from "fastmath_extra.h":
    float mt_erff(float x) noexcept nogil
    float mt_log1p_unit(float e) noexcept nogil

include "thresholds.pxi"

ctypedef fused real:
    float
    double

cdef enum:
    CHUNK = 16384       # elements per OpenMP task
    BIAS_SPAN = 2048    # elements of the bias repeated into one flat loop (BiasGelu)
    GATE_BLOCK = 256    # elements whose HardSwish gates are computed before their products

cdef enum:
    HARD_SIGMOID = 0
    HARD_SWISH = 1
    SOFTPLUS = 2
    ELU = 3
    SELU = 4
    GELU = 5
    FAST_GELU = 6
    ERF = 7
    CLIP = 8

cdef double GELU_TANH_SCALE = sqrt(2.0 / 3.141592653589793)
cdef double GELU_TANH_CUBIC = 0.044715
cdef double SQRT_HALF = sqrt(0.5)
cdef double INV_SQRT_2PI = 1.0 / sqrt(2.0 * 3.141592653589793)


cdef inline real _exp(real v) noexcept nogil:
    if real is float:
        return mt_expf(v)
    else:
        return exp(v)


cdef inline real _erf(real v) noexcept nogil:
    if real is float:
        return mt_erff(v)
    else:
        return erf(v)


cdef inline real _expm1(real v) noexcept nogil:
    """exp(v) - 1 for v <= 0: float32 from the vectorisable exp (absolute error ~1e-7, where
    libm's expm1f would keep the loop scalar), float64 from libm's expm1."""
    if real is float:
        return mt_expf(v) - 1
    else:
        return expm1(v)


cdef inline real _log1p_unit(real v) noexcept nogil:
    """log1p(v) for v in [0, 1]."""
    if real is float:
        return mt_log1p_unit(v)
    else:
        return log1p(v)


cdef inline real _abs(real v) noexcept nogil:
    if real is float:
        return fabsf(v)
    else:
        return fabs(v)


cdef inline real _sigmoid(real v) noexcept nogil:
    """1 / (1 + exp(-v)) from e = exp(-|v|) <= 1: nothing overflows."""
    cdef real e = _exp(-_abs(v))
    return (<real>1 if v >= 0 else e) / (<real>1 + e)


cdef inline real _unit_clamp(real v) noexcept nogil:
    return 0 if v < 0 else (1 if v > 1 else v)


cdef inline real _clamp_unit(real v) noexcept nogil:
    """v clamped to [0, 1] by two selects, a form the compiler vectorises (NaN gives 0)."""
    v = v if v > 0 else 0
    return v if v < 1 else 1


cdef inline real _gelu_tanh_s(real x) noexcept nogil:
    """(1 + tanh(u)) / 2 = sigmoid(2u) of the tanh form's u = K (x + C x^3): taken as a sigmoid,
    it keeps its precision where tanh(u) rounds to -1."""
    return _sigmoid(<real>(2 * GELU_TANH_SCALE) * (x + <real>GELU_TANH_CUBIC * x * x * x))


cdef inline real _gelu(real x) noexcept nogil:
    return <real>0.5 * x * (<real>1 + _erf(x * <real>SQRT_HALF))


cdef inline real _gelu_grad(real dy, real x) noexcept nogil:
    """dY (Phi(x) + x phi(x))."""
    return dy * (<real>0.5 * (<real>1 + _erf(x * <real>SQRT_HALF)) + x * (<real>INV_SQRT_2PI * _exp(<real>-0.5 * x * x)))


cdef void _forward_chunk(int op, const real* x, real* y, Py_ssize_t n, real a, real b) noexcept nogil:
    cdef Py_ssize_t i, start, m
    cdef real v, half = 0.5, one = 1
    cdef real gate[GATE_BLOCK]
    if op == HARD_SIGMOID:
        for i in range(n):
            y[i] = _unit_clamp(a * x[i] + b)
    elif op == HARD_SWISH:      # the gates of a block first, then the products: a gate the compiler
        start = 0               # sees as the constant 0 would fold -inf * 0 and NaN * 0 (NaN in ONNX
        while start < n:        # and PyTorch) into 0
            m = min(<Py_ssize_t>GATE_BLOCK, n - start)
            for i in range(m):
                gate[i] = _clamp_unit(x[start + i] / 6 + half)
            for i in range(m):
                y[start + i] = x[start + i] * gate[i]
            start += m
    elif op == SOFTPLUS:
        for i in range(n):
            v = x[i]
            y[i] = (v if v > 0 else 0) + _log1p_unit(_exp(-_abs(v)))
    elif op == ELU:
        for i in range(n):
            v = x[i]
            y[i] = v if v > 0 else a * _expm1(v)
    elif op == SELU:
        for i in range(n):
            v = x[i]
            y[i] = b * (v if v > 0 else a * _expm1(v))
    elif op == GELU:
        for i in range(n):
            y[i] = _gelu(x[i])
    elif op == FAST_GELU:
        for i in range(n):
            y[i] = x[i] * _gelu_tanh_s(x[i])
    elif op == ERF:
        for i in range(n):
            y[i] = _erf(x[i])
    elif op == CLIP:            # max with a, then min with b: NaN stays NaN, and a > b gives b everywhere
        for i in range(n):
            v = a if x[i] < a else x[i]
            y[i] = b if v > b else v


cdef void _backward_chunk(int op, const real* dy, const real* x, real* dx, Py_ssize_t n, real a,
                          real b) noexcept nogil:
    cdef Py_ssize_t i
    cdef real v, t, half = 0.5, one = 1
    if op == HARD_SIGMOID:
        for i in range(n):
            v = a * x[i] + b
            dx[i] = a * dy[i] if v > 0 and v < 1 else 0
    elif op == HARD_SWISH:      # PyTorch's: 0 below -3, dY (X / 3 + 1/2) up to 3 included, dY above
        for i in range(n):      # and where X is NaN; the factor chosen by selects, so the loop vectorises
            v = x[i]
            t = dy[i] * (v / 3 + half if v <= 3 else one)
            dx[i] = 0 if v < -3 else t
    elif op == SOFTPLUS:
        for i in range(n):
            dx[i] = dy[i] * _sigmoid(x[i])
    elif op == ELU:
        for i in range(n):
            v = x[i]
            dx[i] = dy[i] if v > 0 else dy[i] * (a * _exp(v))
    elif op == SELU:
        for i in range(n):
            v = x[i]
            dx[i] = b * (dy[i] if v > 0 else dy[i] * (a * _exp(v)))
    elif op == GELU:
        for i in range(n):
            dx[i] = _gelu_grad(dy[i], x[i])
    elif op == FAST_GELU:      # with s = sigmoid(2u): dY (s + 2 x s (1 - s) u'(x))
        for i in range(n):
            v = x[i]
            t = _gelu_tanh_s(v)
            dx[i] = dy[i] * (t + 2 * v * t * (one - t) * (<real>GELU_TANH_SCALE * (one + <real>(3 * GELU_TANH_CUBIC) * v * v)))
    elif op == CLIP:           # ClipGrad's: 0 outside [a, b], dY inside and where x is NaN
        for i in range(n):
            v = x[i]
            dx[i] = 0 if (v < a) | (v > b) else dy[i]


cdef void _forward(int op, const real[::1] x, real[::1] y, real a, real b, int num_threads) noexcept nogil:
    cdef Py_ssize_t n = x.shape[0], c, start, stop
    cdef Py_ssize_t chunks = (n + CHUNK - 1) // CHUNK
    for c in prange(chunks, schedule="static", num_threads=threads_for(n, num_threads, MT_MIN_PARALLEL_ELEMENTWISE)):
        start = c * CHUNK
        stop = min(start + CHUNK, n)
        _forward_chunk(op, &x[start], &y[start], stop - start, a, b)


cdef void _backward(int op, const real[::1] dy, const real[::1] x, real[::1] dx, real a, real b,
                    int num_threads) noexcept nogil:
    cdef Py_ssize_t n = dy.shape[0], c, start, stop
    cdef Py_ssize_t chunks = (n + CHUNK - 1) // CHUNK
    for c in prange(chunks, schedule="static", num_threads=threads_for(n, num_threads, MT_MIN_PARALLEL_ELEMENTWISE)):
        start = c * CHUNK
        stop = min(start + CHUNK, n)
        _backward_chunk(op, &dy[start], &x[start], &dx[start], stop - start, a, b)


cdef void _bias_gelu_span(const real* x, const real* bias, real* y, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        y[i] = _gelu(x[i] + bias[i])


cdef void _bias_gelu_grad_span(const real* dy, const real* x, const real* bias, real* dx, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        dx[i] = _gelu_grad(dy[i], x[i] + bias[i])


cdef void _bias_gelu(const real[::1] x, const real[::1] tiled, real[::1] y, int num_threads) noexcept nogil:
    """y = gelu(x + bias) over spans of `tiled`, the bias repeated to a whole number of rows: each
    span one flat loop, as long as the flat kernels' loops."""
    cdef Py_ssize_t n = x.shape[0], span = tiled.shape[0], s, start
    for s in prange((n + span - 1) // span, schedule="static",
                    num_threads=threads_for(n, num_threads, MT_MIN_PARALLEL_ELEMENTWISE)):
        start = s * span
        _bias_gelu_span(&x[start], &tiled[0], &y[start], min(span, n - start))


cdef void _bias_gelu_grad(const real[::1] dy, const real[::1] x, const real[::1] tiled, real[::1] dx,
                          int num_threads) noexcept nogil:
    """dx = gelu'(x + bias) dy over spans of `tiled`, as _bias_gelu."""
    cdef Py_ssize_t n = x.shape[0], span = tiled.shape[0], s, start
    for s in prange((n + span - 1) // span, schedule="static",
                    num_threads=threads_for(n, num_threads, MT_MIN_PARALLEL_ELEMENTWISE)):
        start = s * span
        _bias_gelu_grad_span(&dy[start], &x[start], &tiled[0], &dx[start], min(span, n - start))


# --------------------------------------------------------------------------- Python entry points
_OPS = {"hard_sigmoid": HARD_SIGMOID, "hard_swish": HARD_SWISH, "softplus": SOFTPLUS, "elu": ELU, "selu": SELU,
        "gelu": GELU, "fast_gelu": FAST_GELU, "erf": ERF, "clip": CLIP}


def forward(str name, const real[::1] x, real[::1] y, double a, double b, int num_threads):
    """y = f(x) for f in hard_sigmoid, hard_swish, softplus, elu, selu, gelu, fast_gelu, erf, clip."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"activation {name}: buffers of {x.shape[0]} and {y.shape[0]} elements")
    cdef int op = _OPS[name]
    if x.shape[0]:
        with nogil:
            _forward(op, x, y, <real>a, <real>b, num_threads)


def backward(str name, const real[::1] dy, const real[::1] x, real[::1] dx, double a, double b, int num_threads):
    """dx = f'(x) dy for the gradient ops (each reads the forward input X); clip's with its
    bounds a and b is the fused ClipGrad's."""
    if name == "erf":
        raise ValueError(f"activation gradient {name}: {name} has no gradient kernel (its gradient is a graph)")
    if not dy.shape[0] == x.shape[0] == dx.shape[0]:
        raise ValueError(f"activation gradient {name}: buffers of {dy.shape[0]}, {x.shape[0]} "
                         f"and {dx.shape[0]} elements")
    cdef int op = _OPS[name]
    if dy.shape[0]:
        with nogil:
            _backward(op, dy, x, dx, <real>a, <real>b, num_threads)


def _tiled_bias(str name, Py_ssize_t n, bias):
    """The bias repeated to rows of about BIAS_SPAN elements in all; ValueError where it does not
    divide the n elements into rows."""
    cdef Py_ssize_t c = bias.shape[0]
    if c == 0 or n % c:
        raise ValueError(f"activation {name}: a bias of {c} elements does not divide {n} elements into rows")
    bias = np.asarray(bias)
    tiled = np.empty((max(1, BIAS_SPAN // c), c), bias.dtype)
    tiled[...] = bias
    return tiled.reshape(-1)


def bias_gelu(const real[::1] x, const real[::1] bias, real[::1] y, int num_threads):
    """y = gelu(x + bias), x and y rows of bias's size (BiasGelu)."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"activation bias_gelu: buffers of {x.shape[0]} and {y.shape[0]} elements")
    if x.shape[0] == 0:
        return
    cdef const real[::1] tiled = _tiled_bias("bias_gelu", x.shape[0], bias)
    with nogil:
        _bias_gelu(x, tiled, y, num_threads)


def bias_gelu_grad(const real[::1] dy, const real[::1] x, const real[::1] bias, real[::1] dx, int num_threads):
    """dx = gelu'(x + bias) dy, the buffers rows of bias's size (BiasGeluGrad_dX)."""
    if not dy.shape[0] == x.shape[0] == dx.shape[0]:
        raise ValueError(f"activation gradient bias_gelu: buffers of {dy.shape[0]}, {x.shape[0]} "
                         f"and {dx.shape[0]} elements")
    if x.shape[0] == 0:
        return
    cdef const real[::1] tiled = _tiled_bias("bias_gelu", x.shape[0], bias)
    with nogil:
        _bias_gelu_grad(dy, x, tiled, dx, num_threads)
