# cython: language_level=3
"""LayerNormalization, InstanceNormalization and GroupNormalization and their gradients over X
viewed as (rows, cols), each row normalised on its own (minitrain/ops/sample_normalization.py
has the layout): the affine entry of element `col` of row `row` is
((row % period) * cols + col) // stride, where stride divides cols.  So stride == 1 is one scale
and bias per column (LayerNormalization) and stride > 1 runs of `stride` elements sharing one.

Row statistics and the gradient's row sums accumulate in double; the elementwise passes run in
the data's type, as the NumPy formulas they replace.  Rows go to the OpenMP threads in blocks;
the gradient's dscale and dbias sums are accumulated per block (in double) and added up after.
"""
from cython.parallel cimport prange
from libc.math cimport sqrt
from libc.stdlib cimport free, malloc
from libc.string cimport memset

include "thresholds.pxi"

ctypedef fused real:
    float
    double


cdef inline Py_ssize_t _affine_base(Py_ssize_t row, Py_ssize_t cols, Py_ssize_t period,
                                    Py_ssize_t stride) noexcept nogil:
    """The affine entry of the row's first element."""
    return (row % period) * cols // stride


cdef void _forward_rows(const real* x, const real* scale, const real* bias, real* y, real* mean, real* inv_std,
                        Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t cols, Py_ssize_t period, Py_ssize_t stride,
                        double epsilon) noexcept nogil:
    cdef Py_ssize_t r, c, s, base
    cdef const real* row
    cdef real* out
    cdef double total, squares, d
    cdef real m, inv, a, b
    for r in range(r0, r1):
        row, out = x + r * cols, y + r * cols
        total = 0
        for c in range(cols):
            total = total + row[c]
        m = <real>(total / cols)
        squares = 0
        for c in range(cols):
            d = row[c] - m
            squares = squares + d * d
        inv = <real>(1 / sqrt(<real>(squares / cols) + <real>epsilon))
        mean[r], inv_std[r] = m, inv
        base = _affine_base(r, cols, period, stride)
        if stride == 1:
            if bias != NULL:
                for c in range(cols):
                    out[c] = (row[c] - m) * inv * scale[base + c] + bias[base + c]
            else:
                for c in range(cols):
                    out[c] = (row[c] - m) * inv * scale[base + c]
            continue
        for s in range(cols // stride):
            a = scale[base + s]
            b = bias[base + s] if bias != NULL else 0
            for c in range(s * stride, (s + 1) * stride):
                out[c] = (row[c] - m) * inv * a + b


cdef void _backward_rows(const real* dy, const real* x, const real* scale, const real* mean, const real* inv_std,
                         real* dx, double* dscale, double* dbias, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t cols,
                         Py_ssize_t period, Py_ssize_t stride) noexcept nogil:
    """dX of rows r0..r1 (when dx is not NULL), and their dscale, dbias sums added into the
    double accumulators (when not NULL)."""
    cdef Py_ssize_t r, c, s, base
    cdef const real* g_row
    cdef const real* x_row
    cdef real* out
    cdef double sum_g, sum_gn, sd, sb
    cdef real m, inv, n, g, a, mg, mgn
    for r in range(r0, r1):
        g_row, x_row = dy + r * cols, x + r * cols
        m, inv = mean[r], inv_std[r]
        base = _affine_base(r, cols, period, stride)
        if dscale != NULL or dbias != NULL:
            if stride == 1:
                for c in range(cols):
                    dscale[base + c] += g_row[c] * ((x_row[c] - m) * inv)
                    dbias[base + c] += g_row[c]
            else:
                for s in range(cols // stride):
                    sd = 0
                    sb = 0
                    for c in range(s * stride, (s + 1) * stride):
                        sd = sd + g_row[c] * ((x_row[c] - m) * inv)
                        sb = sb + g_row[c]
                    dscale[base + s] += sd
                    dbias[base + s] += sb
        if dx == NULL:
            continue
        # dX = inv * (g - mean(g) - n * mean(g * n)), g = dY * scale, n = (X - mean) * inv
        sum_g = 0
        sum_gn = 0
        for c in range(cols):
            a = scale[base + c] if stride == 1 else scale[base + c // stride]
            g = g_row[c] * a
            sum_g = sum_g + g
            sum_gn = sum_gn + g * ((x_row[c] - m) * inv)
        mg, mgn = <real>(sum_g / cols), <real>(sum_gn / cols)
        out = dx + r * cols
        if stride == 1:
            for c in range(cols):
                out[c] = inv * (g_row[c] * scale[base + c] - mg - (x_row[c] - m) * inv * mgn)
        else:
            for s in range(cols // stride):
                a = scale[base + s]
                for c in range(s * stride, (s + 1) * stride):
                    out[c] = inv * (g_row[c] * a - mg - (x_row[c] - m) * inv * mgn)


def _check_layout(str what, Py_ssize_t size, Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t period, Py_ssize_t stride,
                  Py_ssize_t params):
    if rows < 0 or cols < 1 or rows * cols != size or period < 1 or rows % period or stride < 1 or cols % stride \
            or period * cols // stride != params:
        raise ValueError(f"{what}: layout (rows {rows}, cols {cols}, period {period}, stride {stride}) does not "
                         f"fit {size} elements and {params} affine entries")


cdef int _blocks(Py_ssize_t rows, Py_ssize_t cols, int num_threads) noexcept nogil:
    cdef int nt = threads_for(rows * cols, num_threads, MT_MIN_PARALLEL_ELEMENTWISE)
    return <int>min(<Py_ssize_t>nt, max(rows, <Py_ssize_t>1))


def forward(const real[::1] x, const real[::1] scale, const real[::1] bias, real[::1] y, real[::1] mean,
            real[::1] inv_std, Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t period, Py_ssize_t stride,
            double epsilon, int num_threads):
    """Y = (X - mean) * inv_std * scale + bias per row (bias may be None), with each row's mean
    and inv_std = 1 / sqrt(var + epsilon)."""
    _check_layout("normalization", x.shape[0], rows, cols, period, stride, scale.shape[0])
    if y.shape[0] != x.shape[0] or mean.shape[0] != rows or inv_std.shape[0] != rows \
            or (bias is not None and bias.shape[0] != scale.shape[0]):
        raise ValueError("normalization: output, statistics or bias buffers do not match the layout")
    if rows == 0:
        return
    cdef const real* b = NULL
    if bias is not None:
        b = &bias[0]
    cdef int nb = _blocks(rows, cols, num_threads), k
    for k in prange(nb, nogil=True, schedule="static", num_threads=nb):
        _forward_rows(&x[0], &scale[0], b, &y[0], &mean[0], &inv_std[0], rows * k // nb, rows * (k + 1) // nb,
                      cols, period, stride, epsilon)


def backward(const real[::1] dy, const real[::1] x, const real[::1] scale, const real[::1] mean,
             const real[::1] inv_std, real[::1] dx, real[::1] dscale, real[::1] dbias, Py_ssize_t rows,
             Py_ssize_t cols, Py_ssize_t period, Py_ssize_t stride, int num_threads):
    """dX (None: not computed) and dscale, dbias (both None, or both given) of the forward above."""
    _check_layout("normalization gradient", x.shape[0], rows, cols, period, stride, scale.shape[0])
    if dy.shape[0] != x.shape[0] or mean.shape[0] != rows or inv_std.shape[0] != rows \
            or (dx is not None and dx.shape[0] != x.shape[0]) or (dscale is None) != (dbias is None) \
            or (dscale is not None and (dscale.shape[0] != scale.shape[0] or dbias.shape[0] != scale.shape[0])):
        raise ValueError("normalization gradient: gradient, statistics or output buffers do not match the layout")
    cdef Py_ssize_t params = scale.shape[0], p
    cdef real* dx_ptr = NULL if dx is None else &dx[0]
    cdef bint sums = dscale is not None
    cdef int nb = _blocks(rows, cols, num_threads), k
    cdef double* acc = NULL
    cdef double total_scale, total_bias
    if sums:
        acc = <double*>malloc(2 * nb * params * sizeof(double))
        if acc == NULL:
            raise MemoryError()
        memset(acc, 0, 2 * nb * params * sizeof(double))
    try:
        if rows:
            for k in prange(nb, nogil=True, schedule="static", num_threads=nb):
                _backward_rows(&dy[0], &x[0], &scale[0], &mean[0], &inv_std[0], dx_ptr,
                               acc + 2 * k * params if sums else NULL, acc + (2 * k + 1) * params if sums else NULL,
                               rows * k // nb, rows * (k + 1) // nb, cols, period, stride)
        if sums:
            for p in range(params):
                total_scale = total_bias = 0
                for k in range(nb):
                    total_scale += acc[2 * k * params + p]
                    total_bias += acc[(2 * k + 1) * params + p]
                dscale[p], dbias[p] = <real>total_scale, <real>total_bias
    finally:
        free(acc)
