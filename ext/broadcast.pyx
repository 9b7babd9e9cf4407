# cython: language_level=3
"""A vector broadcast over a contiguous tensor viewed as (outer, kept, inner): the vector has
`kept` entries, each repeated over the outer and inner axes.  That is a per-channel scale or
shift of NCHW data (outer N, kept C, inner H W), a squeeze-excitation gate (N, C, 1, 1) over
(N, C, H, W) (outer 1, kept N C) and a bias of the last axes (inner 1).

binary: y = x op v (or v op x) for op add, sub, mul, in one pass of whole runs, where NumPy
calls its inner loop once per run of `inner` elements.
mul_grad: the gradient of y = a * v: da = dy * v and dv[k] = the sum over o and i of dy * a
(each product rounded to the type of dy, as Mul gives it, and summed in double), one pass over
dy and a.

Runs of `inner` elements (or, for inner == 1, rows of `kept`) go to the OpenMP threads; the
sums of inner == 1 use one row of double accumulators per thread, added up after.
"""
from cython.parallel cimport prange
from libc.stdlib cimport free, malloc
from libc.string cimport memset

include "thresholds.pxi"

ctypedef fused real:
    float
    double

cdef enum:
    ADD = 0
    SUB = 1
    MUL = 2

_OPS = {"add": ADD, "sub": SUB, "mul": MUL}


cdef void _run_scalar(int op, bint vector_first, const real* x, real v, real* y, Py_ssize_t n) noexcept nogil:
    """y = x op v over a run sharing one vector entry v."""
    cdef Py_ssize_t i
    if op == ADD:
        for i in range(n):
            y[i] = x[i] + v
    elif op == MUL:
        for i in range(n):
            y[i] = x[i] * v
    elif vector_first:
        for i in range(n):
            y[i] = v - x[i]
    else:
        for i in range(n):
            y[i] = x[i] - v


cdef void _row_vector(int op, bint vector_first, const real* x, const real* v, real* y, Py_ssize_t n) noexcept nogil:
    """y = x op v over a row of the whole vector (inner == 1)."""
    cdef Py_ssize_t i
    if op == ADD:
        for i in range(n):
            y[i] = x[i] + v[i]
    elif op == MUL:
        for i in range(n):
            y[i] = x[i] * v[i]
    elif vector_first:
        for i in range(n):
            y[i] = v[i] - x[i]
    else:
        for i in range(n):
            y[i] = x[i] - v[i]


cdef void _binary(int op, bint vector_first, const real* x, const real* v, real* y, Py_ssize_t outer,
                  Py_ssize_t kept, Py_ssize_t inner, int nt) noexcept nogil:
    cdef Py_ssize_t r
    if inner == 1:
        for r in prange(outer, schedule="static", num_threads=nt):
            _row_vector(op, vector_first, x + r * kept, v, y + r * kept, kept)
    else:
        for r in prange(outer * kept, schedule="static", num_threads=nt):
            _run_scalar(op, vector_first, x + r * inner, v[r % kept], y + r * inner, inner)


def _check_layout(str what, Py_ssize_t n, Py_ssize_t vector, Py_ssize_t outer, Py_ssize_t kept, Py_ssize_t inner):
    if outer < 0 or kept < 0 or inner < 0 or outer * kept * inner != n or vector != kept:
        raise ValueError(f"broadcast {what}: layout ({outer}, {kept}, {inner}) does not match buffers of "
                         f"{n} and {vector} elements")


def binary(str name, const real[::1] x not None, const real[::1] v not None, real[::1] y not None,
           Py_ssize_t outer, Py_ssize_t kept, Py_ssize_t inner, bint vector_first, int num_threads):
    """y[o, k, i] = x[o, k, i] op v[k] (v[k] op x[o, k, i] with vector_first) for op in add, sub, mul."""
    if name not in _OPS:
        raise ValueError(f"broadcast: no binary op {name!r}; use one of {sorted(_OPS)}")
    _check_layout(name, x.shape[0], v.shape[0], outer, kept, inner)
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"broadcast {name}: buffers of {x.shape[0]} and {y.shape[0]} elements")
    cdef int op = _OPS[name]
    cdef int nt = threads_for(x.shape[0], num_threads, MT_MIN_PARALLEL_ELEMENTWISE)
    if x.shape[0]:
        with nogil:
            _binary(op, vector_first, &x[0], &v[0], &y[0], outer, kept, inner, nt)


cdef double _entry_grad(const real* dy, const real* a, real v, real* da, Py_ssize_t k, Py_ssize_t outer,
                        Py_ssize_t kept, Py_ssize_t inner) noexcept nogil:
    """da = dy * v over the runs of entry k (da NULL: none); returns the sum of dy * a over them
    (0 where a is NULL)."""
    cdef Py_ssize_t o, i, start
    cdef double s = 0
    for o in range(outer):
        start = (o * kept + k) * inner
        if a != NULL:
            for i in range(start, start + inner):
                s = s + <double>(dy[i] * a[i])
        if da != NULL:
            for i in range(start, start + inner):
                da[i] = dy[i] * v
    return s


cdef void _rows_grad(const real* dy, const real* a, const real* v, real* da, double* acc, Py_ssize_t o0,
                     Py_ssize_t o1, Py_ssize_t kept) noexcept nogil:
    """For rows o0..o1 of an inner == 1 layout: da = dy * v (da NULL: none), acc += dy * a (a
    NULL: none)."""
    cdef Py_ssize_t o, k
    cdef const real* g
    for o in range(o0, o1):
        g = dy + o * kept
        if a != NULL:
            for k in range(kept):
                acc[k] += <double>(g[k] * a[o * kept + k])
        if da != NULL:
            for k in range(kept):
                da[o * kept + k] = g[k] * v[k]


def mul_grad(const real[::1] dy not None, const real[::1] a not None, const real[::1] v not None, real[::1] da,
             real[::1] dv, Py_ssize_t outer, Py_ssize_t kept, Py_ssize_t inner, int num_threads):
    """The gradient of y = a * v broadcast as (outer, kept, inner): da = dy * v, dv[k] = the sum
    of dy * a over o and i.  da or dv may be None (not computed); a is read only for dv."""
    _check_layout("mul_grad", dy.shape[0], v.shape[0], outer, kept, inner)
    if a.shape[0] != dy.shape[0] or (da is not None and da.shape[0] != dy.shape[0]) or \
            (dv is not None and dv.shape[0] != kept):
        raise ValueError(f"broadcast mul_grad: buffers of {dy.shape[0]} (dy), {a.shape[0]} (a), "
                         f"{-1 if da is None else da.shape[0]} (da) and {-1 if dv is None else dv.shape[0]} (dv) "
                         f"elements for layout ({outer}, {kept}, {inner})")
    if kept == 0:
        return
    cdef const real* a_ptr = &a[0] if dv is not None and dy.shape[0] else NULL
    cdef real* da_ptr = &da[0] if da is not None and dy.shape[0] else NULL
    cdef int nt = threads_for(dy.shape[0], num_threads, MT_MIN_PARALLEL_ELEMENTWISE)
    cdef int nb, b
    cdef Py_ssize_t k
    cdef double* acc
    cdef double total
    if dy.shape[0] == 0:
        if dv is not None:
            dv[:] = 0
        return
    if inner > 1 or outer == 1:
        if dv is None:
            for k in prange(kept, nogil=True, schedule="static", num_threads=nt):
                _entry_grad(&dy[0], a_ptr, v[k], da_ptr, k, outer, kept, inner)
        else:
            for k in prange(kept, nogil=True, schedule="static", num_threads=nt):
                dv[k] = <real>_entry_grad(&dy[0], a_ptr, v[k], da_ptr, k, outer, kept, inner)
        return
    nb = <int>min(<Py_ssize_t>nt, outer)
    acc = <double*>malloc(nb * kept * sizeof(double))
    if acc == NULL:
        raise MemoryError()
    memset(acc, 0, nb * kept * sizeof(double))
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        _rows_grad(&dy[0], a_ptr, &v[0], da_ptr, acc + b * kept, outer * b // nb, outer * (b + 1) // nb, kept)
    if dv is not None:
        for k in range(kept):
            total = 0
            for b in range(nb):
                total += acc[b * kept + k]
            dv[k] = <real>total
    free(acc)
