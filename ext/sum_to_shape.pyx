# cython: language_level=3
"""The sums of SumToShape's common patterns (the bias gradients of broadcast adds): a
contiguous tensor viewed as (outer, kept, inner) summed over its first and last axes,
out[k] = sum of x[o, k, i] over o and i.  A bias over the last axes is inner == 1 (column
sums, a vectorisable loop over `kept` per row), a per-channel bias of NCHW data is the general
form (a vectorisable sum over each contiguous run of `inner`), a sum over trailing axes is
outer == 1.

Sums accumulate in double.  With outer large enough, blocks of `outer` go to the OpenMP
threads, each into its own row of double accumulators, added up after; otherwise the kept
entries are split over the threads.
"""
from cython.parallel cimport prange
from libc.stdlib cimport free, malloc
from libc.string cimport memset

include "thresholds.pxi"

ctypedef fused real:
    float
    double


cdef void _block_sums(const real* x, double* acc, Py_ssize_t o0, Py_ssize_t o1, Py_ssize_t kept,
                      Py_ssize_t inner) noexcept nogil:
    """acc[k] += the sum of x[o, k, :] over o in o0..o1."""
    cdef Py_ssize_t o, k, i, step = kept * inner
    cdef const real* row
    cdef double s
    if inner == 1:              # four rows per update of acc: a quarter of its load-add-store chain
        o = o0
        while o + 4 <= o1:
            row = x + o * step
            for k in range(kept):
                acc[k] += (<double>row[k] + row[step + k]) + (<double>row[2 * step + k] + row[3 * step + k])
            o += 4
        for o in range(o, o1):
            row = x + o * step
            for k in range(kept):
                acc[k] += row[k]
        return
    for o in range(o0, o1):
        row = x + o * step
        for k in range(kept):
            s = 0
            for i in range(inner):
                s = s + row[k * inner + i]
            acc[k] += s


cdef double _entry_sum(const real* x, Py_ssize_t k, Py_ssize_t outer, Py_ssize_t kept,
                       Py_ssize_t inner) noexcept nogil:
    """The sum of x[o, k, :] over every o."""
    cdef Py_ssize_t o, i
    cdef const real* run
    cdef double s = 0
    for o in range(outer):
        run = x + (o * kept + k) * inner
        for i in range(inner):
            s = s + run[i]
    return s


def middle_sums(const real[::1] x, real[::1] out, Py_ssize_t outer, Py_ssize_t kept, Py_ssize_t inner,
                int num_threads):
    """out[k] = the sum of x[o, k, i] over o and i, x viewed as (outer, kept, inner)."""
    if outer < 0 or kept < 0 or inner < 0 or outer * kept * inner != x.shape[0] or out.shape[0] != kept:
        raise ValueError(f"sum to shape: layout ({outer}, {kept}, {inner}) does not match buffers of "
                         f"{x.shape[0]} and {out.shape[0]} elements")
    if kept == 0:
        return
    if x.shape[0] == 0:
        out[:] = 0
        return
    cdef int nt = threads_for(x.shape[0], num_threads, MT_MIN_PARALLEL_REDUCE)
    cdef int nb = <int>min(<Py_ssize_t>nt, outer), b
    cdef Py_ssize_t k
    cdef double* acc
    cdef double total
    if nb == 1 and nt > 1:      # too few blocks of outer: split the kept entries instead
        for k in prange(kept, nogil=True, schedule="static", num_threads=nt):
            out[k] = <real>_entry_sum(&x[0], k, outer, kept, inner)
        return
    acc = <double*>malloc(nb * kept * sizeof(double))
    if acc == NULL:
        raise MemoryError()
    memset(acc, 0, nb * kept * sizeof(double))
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        _block_sums(&x[0], acc + b * kept, outer * b // nb, outer * (b + 1) // nb, kept, inner)
    for k in range(kept):
        total = 0
        for b in range(nb):
            total += acc[b * kept + k]
        out[k] = <real>total
    free(acc)
