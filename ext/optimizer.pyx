# cython: language_level=3
"""Optimizer updates over flat contiguous buffers, written in place.

These are the only kernels of minitrain that write into their inputs: the parameter and its
optimizer state are updated where they live, so a step allocates nothing.  The gradient is
read-only and multiplied by `grad_scale` (the global-norm clipping factor, 1 without clipping).
Reductions are split into fixed chunks summed in order, so results do not depend on the number
of threads (bitwise resume from a checkpoint relies on it).
"""
from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBUF_FORMAT, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cython.parallel cimport prange
from libc.math cimport sqrt, sqrtf
from libc.stdlib cimport calloc, free, malloc

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


cdef double _sgd_chunk(real* w, const real* g, real* buf, Py_ssize_t start, Py_ssize_t end, real lr, real mu,
                       real wd, real sc, bint use_buf, bint nesterov, bint with_norm) noexcept nogil:
    """PyTorch's SGD on elements [start, end): d = sc*g + wd*w; buf = mu*buf + d (use_buf);
    d = d + mu*buf (nesterov) or buf; w -= lr*d.  Returns sum(g * g) there when with_norm."""
    cdef Py_ssize_t i
    cdef double s = 0
    cdef real d, b
    for i in range(start, end):
        if with_norm:
            s = s + <double> g[i] * <double> g[i]
        d = sc * g[i] + wd * w[i]
        if use_buf:
            b = mu * buf[i] + d
            buf[i] = b
            d = d + mu * b if nesterov else b
        w[i] = w[i] - lr * d
    return s


cdef double _sgd_tensors(real** w, real** g, real** buf, const Py_ssize_t* sizes, Py_ssize_t count,
                         const double* rates, const double* decays, double momentum, double grad_scale,
                         bint nesterov, bint with_norm, double* partial, int num_threads) noexcept nogil:
    """_sgd_chunk over `count` tensors in turn, the large ones split in chunks over the threads
    (`partial` holds a tensor's chunk sums); returns the sum over tensors of each one's
    squared_norm when with_norm."""
    cdef Py_ssize_t k, c, n, chunks
    cdef double total = 0, tensor_total
    cdef real mu = <real> momentum, sc = <real> grad_scale
    cdef bint use_buf = momentum != 0
    for k in range(count):
        n = sizes[k]
        chunks = (n + CHUNK - 1) // CHUNK
        if _threads(n, num_threads) == 1:
            for c in range(chunks):
                partial[c] = _sgd_chunk(w[k], g[k], buf[k], c * CHUNK, min((c + 1) * CHUNK, n), <real> rates[k],
                                        mu, <real> decays[k], sc, use_buf, nesterov, with_norm)
        else:
            for c in prange(chunks, schedule="static", num_threads=num_threads):
                partial[c] = _sgd_chunk(w[k], g[k], buf[k], c * CHUNK, min((c + 1) * CHUNK, n), <real> rates[k],
                                        mu, <real> decays[k], sc, use_buf, nesterov, with_norm)
        tensor_total = 0
        for c in range(chunks):
            tensor_total += partial[c]
        total += tensor_total
    return total


def sgd_update_all(list params, list grads, list buffers, const double[::1] rates, const double[::1] decays,
                   double momentum, double grad_scale, bint nesterov, bint with_norm, int num_threads):
    """PyTorch's SGD on every (param, grad, buffer) in one call, the parameters and buffers written
    in place (`buffers` ignored when momentum is 0); all tensors C-contiguous, of one float type.
    Returns the sum of the gradients' squares, as squared_norm adds it up, when with_norm (the
    norm of an update that needs no clipping comes from the same pass), else 0."""
    cdef Py_ssize_t count = len(params), k
    cdef bint has_buf = momentum != 0
    cdef Py_buffer* views = <Py_buffer*> calloc(3 * count + 1, sizeof(Py_buffer))
    cdef void** pointers = <void**> calloc(3 * count + 1, sizeof(void*))
    cdef Py_ssize_t* sizes = <Py_ssize_t*> calloc(count + 1, sizeof(Py_ssize_t))
    cdef double* partial = NULL
    cdef Py_ssize_t acquired = 0, most = 0
    cdef bytes kind = None
    cdef double total
    try:
        if views == NULL or pointers == NULL or sizes == NULL:
            raise MemoryError()
        if len(grads) != count or (has_buf and len(buffers) != count) or rates.shape[0] != count \
                or decays.shape[0] != count:
            raise ValueError(f"sgd_update_all: {count} params but {len(grads)} grads, "
                             f"{len(buffers)} buffers, {rates.shape[0]} rates, {decays.shape[0]} decays")
        for k in range(3 * count if has_buf else 2 * count):
            tensor = (params, grads, buffers)[k // count][k % count]
            PyObject_GetBuffer(tensor, &views[k], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT |
                               (0 if count <= k < 2 * count else PyBUF_WRITABLE))
            acquired += 1
            if kind is None:
                kind = <bytes> views[k].format
            if <bytes> views[k].format != kind or kind not in (b"f", b"d") or \
                    views[k].len != views[k % count].len:
                raise ValueError(f"sgd_update_all: tensor #{k} (format {views[k].format!r}, {views[k].len} bytes) "
                                 f"does not match the first (format {kind!r}) or its parameter")
            pointers[k] = views[k].buf
        for k in range(count):
            sizes[k] = views[k].len // views[k].itemsize
            most = max(most, sizes[k])
        partial = <double*> malloc(((most + CHUNK - 1) // CHUNK + 1) * sizeof(double))
        if partial == NULL:
            raise MemoryError()
        with nogil:
            if kind == b"f":
                total = _sgd_tensors(<float**> pointers, <float**> &pointers[count], <float**> &pointers[2 * count],
                                     sizes, count, &rates[0], &decays[0], momentum, grad_scale, nesterov,
                                     with_norm, partial, num_threads)
            else:
                total = _sgd_tensors(<double**> pointers, <double**> &pointers[count],
                                     <double**> &pointers[2 * count], sizes, count, &rates[0], &decays[0],
                                     momentum, grad_scale, nesterov, with_norm, partial, num_threads)
        return total
    finally:
        for k in range(acquired):
            PyBuffer_Release(&views[k])
        free(views)
        free(pointers)
        free(sizes)
        free(partial)


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
