# cython: language_level=3
"""Resize along one axis of a contiguous tensor viewed as (outer, size, inner), and its
gradient: output (outer, out, inner), element (o, j, i) at (o * out + j) * inner + i.

Nearest mode copies input position pos[j] to output position j; linear mode blends the
positions left[j] and right[j] with weights 1 - w[j] and w[j] (minitrain/ops/resize.py computes
the maps).  The gradients add dY back along the same maps, each `o` writing its own slab of dX,
so the outer slabs go to the OpenMP threads without any sharing.  Every loop over `inner` is a
contiguous, vectorisable one; inner == 1 (the last axis) is a gather or a scatter per row.
"""
from cython.parallel cimport prange
from libc.stdint cimport int64_t
from libc.string cimport memcpy, memset

include "thresholds.pxi"

ctypedef fused real:
    float
    double


cdef void _nearest_slab(const real* x, real* y, Py_ssize_t size, Py_ssize_t out, Py_ssize_t inner,
                        const int64_t* pos) noexcept nogil:
    cdef Py_ssize_t j
    if inner == 1:
        for j in range(out):
            y[j] = x[pos[j]]
    else:
        for j in range(out):
            memcpy(y + j * inner, x + pos[j] * inner, inner * sizeof(real))


cdef void _linear_slab(const real* x, real* y, Py_ssize_t size, Py_ssize_t out, Py_ssize_t inner,
                       const int64_t* left, const int64_t* right, const real* w) noexcept nogil:
    cdef Py_ssize_t j, i
    cdef const real* a
    cdef const real* b
    cdef real* row
    cdef real wl, wr
    if inner == 1:
        for j in range(out):
            y[j] = x[left[j]] * (1 - w[j]) + x[right[j]] * w[j]
        return
    for j in range(out):
        a, b, row = x + left[j] * inner, x + right[j] * inner, y + j * inner
        wl, wr = 1 - w[j], w[j]
        for i in range(inner):
            row[i] = a[i] * wl + b[i] * wr


cdef void _nearest_grad_slab(const real* dy, real* dx, Py_ssize_t size, Py_ssize_t out, Py_ssize_t inner,
                             const int64_t* pos) noexcept nogil:
    cdef Py_ssize_t j, i
    cdef const real* src
    cdef real* dst
    memset(dx, 0, size * inner * sizeof(real))
    if inner == 1:
        for j in range(out):
            dx[pos[j]] += dy[j]
        return
    for j in range(out):
        src, dst = dy + j * inner, dx + pos[j] * inner
        for i in range(inner):
            dst[i] += src[i]


cdef void _linear_grad_slab(const real* dy, real* dx, Py_ssize_t size, Py_ssize_t out, Py_ssize_t inner,
                            const int64_t* left, const int64_t* right, const real* w) noexcept nogil:
    cdef Py_ssize_t j, i
    cdef const real* src
    cdef real* a
    cdef real* b
    cdef real wl, wr
    memset(dx, 0, size * inner * sizeof(real))
    if inner == 1:
        for j in range(out):
            dx[left[j]] += dy[j] * (1 - w[j])
            dx[right[j]] += dy[j] * w[j]
        return
    for j in range(out):
        src, a, b = dy + j * inner, dx + left[j] * inner, dx + right[j] * inner
        wl, wr = 1 - w[j], w[j]
        for i in range(inner):
            a[i] += src[i] * wl
        for i in range(inner):
            b[i] += src[i] * wr


def _check(str what, Py_ssize_t x_size, Py_ssize_t y_size, Py_ssize_t outer, Py_ssize_t size, Py_ssize_t out,
           Py_ssize_t inner, maps):
    cdef Py_ssize_t j
    if outer < 0 or size < 1 or out < 0 or inner < 0 or outer * size * inner != x_size \
            or outer * out * inner != y_size:
        raise ValueError(f"{what}: layout (outer {outer}, size {size}, out {out}, inner {inner}) does not match "
                         f"buffers of {x_size} and {y_size} elements")
    for name, positions in maps:
        if positions.shape[0] != out:
            raise ValueError(f"{what}: {name} holds {positions.shape[0]} entries for {out} output positions")
        for j in range(out):
            if not 0 <= positions[j] < size:
                raise ValueError(f"{what}: {name}[{j}] = {positions[j]} is outside [0, {size})")


def nearest(const real[::1] x, real[::1] y, Py_ssize_t outer, Py_ssize_t size, Py_ssize_t out,
            Py_ssize_t inner, const int64_t[::1] pos, int num_threads):
    """y[o, j, :] = x[o, pos[j], :]."""
    _check("resize (nearest)", x.shape[0], y.shape[0], outer, size, out, inner, (("pos", pos),))
    cdef Py_ssize_t o
    if y.shape[0] == 0:
        return
    for o in prange(outer, nogil=True, schedule="static",
                    num_threads=threads_for(y.shape[0], num_threads, MT_MIN_PARALLEL_GATHER)):
        _nearest_slab(&x[o * size * inner], &y[o * out * inner], size, out, inner, &pos[0])


def linear(const real[::1] x, real[::1] y, Py_ssize_t outer, Py_ssize_t size, Py_ssize_t out,
           Py_ssize_t inner, const int64_t[::1] left, const int64_t[::1] right, const real[::1] w, int num_threads):
    """y[o, j, :] = x[o, left[j], :] (1 - w[j]) + x[o, right[j], :] w[j]."""
    _check("resize (linear)", x.shape[0], y.shape[0], outer, size, out, inner, (("left", left), ("right", right)))
    if w.shape[0] != out:
        raise ValueError(f"resize (linear): {w.shape[0]} weights for {out} output positions")
    cdef Py_ssize_t o
    if y.shape[0] == 0:
        return
    for o in prange(outer, nogil=True, schedule="static",
                    num_threads=threads_for(y.shape[0], num_threads, MT_MIN_PARALLEL_GATHER)):
        _linear_slab(&x[o * size * inner], &y[o * out * inner], size, out, inner, &left[0], &right[0], &w[0])


def nearest_grad(const real[::1] dy, real[::1] dx, Py_ssize_t outer, Py_ssize_t size, Py_ssize_t out,
                 Py_ssize_t inner, const int64_t[::1] pos, int num_threads):
    """dx[o, p, :] = the sum of dy[o, j, :] over the j with pos[j] == p (0 where none)."""
    _check("resize gradient (nearest)", dx.shape[0], dy.shape[0], outer, size, out, inner, (("pos", pos),))
    cdef Py_ssize_t o
    if dx.shape[0] == 0:
        return
    if out == 0:
        dx[:] = 0
        return
    for o in prange(outer, nogil=True, schedule="static",
                    num_threads=threads_for(dy.shape[0], num_threads, MT_MIN_PARALLEL_GATHER)):
        _nearest_grad_slab(&dy[o * out * inner], &dx[o * size * inner], size, out, inner, &pos[0])


def linear_grad(const real[::1] dy, real[::1] dx, Py_ssize_t outer, Py_ssize_t size, Py_ssize_t out,
                Py_ssize_t inner, const int64_t[::1] left, const int64_t[::1] right, const real[::1] w,
                int num_threads):
    """dx[o, p, :] = the sum of dy[o, j, :] (1 - w[j]) over the j with left[j] == p, plus that of
    dy[o, j, :] w[j] over the j with right[j] == p."""
    _check("resize gradient (linear)", dx.shape[0], dy.shape[0], outer, size, out, inner,
           (("left", left), ("right", right)))
    if w.shape[0] != out:
        raise ValueError(f"resize gradient (linear): {w.shape[0]} weights for {out} output positions")
    cdef Py_ssize_t o
    if dx.shape[0] == 0:
        return
    if out == 0:
        dx[:] = 0
        return
    for o in prange(outer, nogil=True, schedule="static",
                    num_threads=threads_for(dy.shape[0], num_threads, MT_MIN_PARALLEL_GATHER)):
        _linear_grad_slab(&dy[o * out * inner], &dx[o * size * inner], size, out, inner, &left[0], &right[0],
                          &w[0])
