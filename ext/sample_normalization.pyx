# cython: language_level=3
"""LayerNormalization, InstanceNormalization and GroupNormalization and their gradients over X
viewed as (rows, cols), each row normalised on its own (minitrain/ops/sample_normalization.py
has the layout): the affine entry of element `col` of row `row` is
((row % period) * cols + col) // stride, where stride divides cols.  So stride == 1 is one scale
and bias per column (LayerNormalization) and stride > 1 runs of `stride` elements sharing one.

Row statistics and the gradient's row sums accumulate in double (in the data's type for the
short rows of layer_norm_short.h); the elementwise passes run in the data's type.  Rows go to
the OpenMP threads in blocks; the gradient's dscale and dbias sums are accumulated per block
(in double) and added up after.
"""
from cython.parallel cimport prange
from libc.math cimport sqrt
from libc.stdlib cimport free, malloc
from libc.string cimport memset

include "thresholds.pxi"

cdef extern from "layer_norm_short.h":
    int mt_layer_norm_short_f_forward(const float* x, const float* scale, const float* bias, float* y, float* mean,
                                      float* inv_std, Py_ssize_t rows, Py_ssize_t cols, double epsilon) noexcept nogil
    int mt_layer_norm_short_d_forward(const double* x, const double* scale, const double* bias, double* y,
                                      double* mean, double* inv_std, Py_ssize_t rows, Py_ssize_t cols,
                                      double epsilon) noexcept nogil
    int mt_layer_norm_short_f_backward(const float* dy, const float* x, const float* scale, const float* mean,
                                       const float* inv_std, float* dx, double* dscale, double* dbias, Py_ssize_t rows,
                                       Py_ssize_t cols) noexcept nogil
    int mt_layer_norm_short_d_backward(const double* dy, const double* x, const double* scale, const double* mean,
                                       const double* inv_std, double* dx, double* dscale, double* dbias,
                                       Py_ssize_t rows, Py_ssize_t cols) noexcept nogil

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


# LayerNormalization (one affine entry per column, no period) over short rows, a channel-last
# normalisation over a few channels: rows of 4, 8, 16, 32 or 64 elements go to the kernels of
# layer_norm_short.h, compiled for their width.  Other rows are taken LN_BLOCK side by side,
# one independent accumulator per row, each still summed over its columns in order.
cdef enum:
    LN_BLOCK = 16


cdef inline void _layer_norm_block(const real* x, const real* scale, const real* bias, real* y, real* mean,
                                   real* inv_std, Py_ssize_t n, Py_ssize_t cols, double epsilon) noexcept nogil:
    """The forward of the n <= LN_BLOCK rows at x (statistics at mean, inv_std)."""
    cdef double total[LN_BLOCK]
    cdef double squares[LN_BLOCK]
    cdef real m[LN_BLOCK]
    cdef real inv[LN_BLOCK]
    cdef Py_ssize_t j, c
    cdef double d
    cdef const real* row
    cdef real* out
    for j in range(n):
        total[j] = 0
        squares[j] = 0
    for c in range(cols):
        for j in range(n):
            total[j] = total[j] + x[j * cols + c]
    for j in range(n):
        m[j] = <real>(total[j] / cols)
    for c in range(cols):
        for j in range(n):
            d = x[j * cols + c] - m[j]
            squares[j] = squares[j] + d * d
    for j in range(n):
        inv[j] = <real>(1 / sqrt(<real>(squares[j] / cols) + <real>epsilon))
        mean[j], inv_std[j] = m[j], inv[j]
    for j in range(n):
        row, out = x + j * cols, y + j * cols
        if bias != NULL:
            for c in range(cols):
                out[c] = (row[c] - m[j]) * inv[j] * scale[c] + bias[c]
        else:
            for c in range(cols):
                out[c] = (row[c] - m[j]) * inv[j] * scale[c]


cdef void _layer_norm_rows(const real* x, const real* scale, const real* bias, real* y, real* mean, real* inv_std,
                           Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t cols, double epsilon) noexcept nogil:
    cdef Py_ssize_t r = r0
    cdef int done
    if real is float:
        done = mt_layer_norm_short_f_forward(x + r0 * cols, scale, bias, y + r0 * cols, mean + r0, inv_std + r0,
                                             r1 - r0, cols, epsilon)
    else:
        done = mt_layer_norm_short_d_forward(x + r0 * cols, scale, bias, y + r0 * cols, mean + r0, inv_std + r0,
                                             r1 - r0, cols, epsilon)
    if done:
        return
    while r + LN_BLOCK <= r1:
        _layer_norm_block(x + r * cols, scale, bias, y + r * cols, mean + r, inv_std + r, LN_BLOCK, cols, epsilon)
        r += LN_BLOCK
    if r < r1:
        _layer_norm_block(x + r * cols, scale, bias, y + r * cols, mean + r, inv_std + r, r1 - r, cols, epsilon)


cdef inline void _layer_norm_grad_block(const real* dy, const real* x, const real* scale, const real* mean,
                                        const real* inv_std, real* dx, double* dscale, double* dbias, Py_ssize_t n,
                                        Py_ssize_t cols) noexcept nogil:
    """The gradient of the n <= LN_BLOCK rows at dy, x (dx, and the dscale, dbias sums added
    into the double accumulators, where not NULL)."""
    cdef double sum_g[LN_BLOCK]
    cdef double sum_gn[LN_BLOCK]
    cdef real mg[LN_BLOCK]
    cdef real mgn[LN_BLOCK]
    cdef Py_ssize_t j, c
    cdef real a, g, m, inv
    cdef const real* g_row
    cdef const real* x_row
    cdef real* out
    if dscale != NULL:     # four rows per update of the accumulators: a quarter of their chain
        j = 0
        while j + 4 <= n:
            g_row, x_row = dy + j * cols, x + j * cols
            for c in range(cols):
                dscale[c] += ((<double>g_row[c] * ((x_row[c] - mean[j]) * inv_std[j])
                               + g_row[cols + c] * ((x_row[cols + c] - mean[j + 1]) * inv_std[j + 1]))
                              + (<double>g_row[2 * cols + c] * ((x_row[2 * cols + c] - mean[j + 2]) * inv_std[j + 2])
                                 + g_row[3 * cols + c] * ((x_row[3 * cols + c] - mean[j + 3]) * inv_std[j + 3])))
                dbias[c] += ((<double>g_row[c] + g_row[cols + c])
                             + (<double>g_row[2 * cols + c] + g_row[3 * cols + c]))
            j += 4
        for j in range(j, n):
            g_row, x_row, m, inv = dy + j * cols, x + j * cols, mean[j], inv_std[j]
            for c in range(cols):
                dscale[c] += g_row[c] * ((x_row[c] - m) * inv)
                dbias[c] += g_row[c]
    if dx == NULL:
        return
    # dX = inv * (g - mean(g) - n * mean(g * n)), g = dY * scale, n = (X - mean) * inv
    for j in range(n):
        sum_g[j] = 0
        sum_gn[j] = 0
    for c in range(cols):
        a = scale[c]
        for j in range(n):
            g = dy[j * cols + c] * a
            sum_g[j] = sum_g[j] + g
            sum_gn[j] = sum_gn[j] + g * ((x[j * cols + c] - mean[j]) * inv_std[j])
    for j in range(n):
        mg[j], mgn[j] = <real>(sum_g[j] / cols), <real>(sum_gn[j] / cols)
    for j in range(n):
        g_row, x_row, out, m, inv = dy + j * cols, x + j * cols, dx + j * cols, mean[j], inv_std[j]
        for c in range(cols):
            out[c] = inv * (g_row[c] * scale[c] - mg[j] - (x_row[c] - m) * inv * mgn[j])


cdef void _layer_norm_grad_rows(const real* dy, const real* x, const real* scale, const real* mean,
                                const real* inv_std, real* dx, double* dscale, double* dbias, Py_ssize_t r0,
                                Py_ssize_t r1, Py_ssize_t cols) noexcept nogil:
    cdef Py_ssize_t r = r0
    cdef int done
    if real is float:
        done = mt_layer_norm_short_f_backward(dy + r0 * cols, x + r0 * cols, scale, mean + r0, inv_std + r0,
                                              NULL if dx == NULL else dx + r0 * cols, dscale, dbias, r1 - r0, cols)
    else:
        done = mt_layer_norm_short_d_backward(dy + r0 * cols, x + r0 * cols, scale, mean + r0, inv_std + r0,
                                              NULL if dx == NULL else dx + r0 * cols, dscale, dbias, r1 - r0, cols)
    if done:
        return
    while r + LN_BLOCK <= r1:
        _layer_norm_grad_block(dy + r * cols, x + r * cols, scale, mean + r, inv_std + r,
                               NULL if dx == NULL else dx + r * cols, dscale, dbias, LN_BLOCK, cols)
        r += LN_BLOCK
    if r < r1:
        _layer_norm_grad_block(dy + r * cols, x + r * cols, scale, mean + r, inv_std + r,
                               NULL if dx == NULL else dx + r * cols, dscale, dbias, r1 - r, cols)


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
    cdef bint per_column = period == 1 and stride == 1
    for k in prange(nb, nogil=True, schedule="static", num_threads=nb):
        if per_column:
            _layer_norm_rows(&x[0], &scale[0], b, &y[0], &mean[0], &inv_std[0], rows * k // nb, rows * (k + 1) // nb,
                             cols, epsilon)
        else:
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
    cdef bint per_column = period == 1 and stride == 1
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
                if per_column:
                    _layer_norm_grad_rows(&dy[0], &x[0], &scale[0], &mean[0], &inv_std[0], dx_ptr,
                                          acc + 2 * k * params if sums else NULL,
                                          acc + (2 * k + 1) * params if sums else NULL,
                                          rows * k // nb, rows * (k + 1) // nb, cols)
                else:
                    _backward_rows(&dy[0], &x[0], &scale[0], &mean[0], &inv_std[0], dx_ptr,
                                   acc + 2 * k * params if sums else NULL,
                                   acc + (2 * k + 1) * params if sums else NULL,
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
