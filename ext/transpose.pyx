# cython: language_level=3
"""Batched 2-D transposes of flat C-contiguous buffers (ext/transpose.h): the permutations of
Transpose that, with neighbouring axes merged, swap the last two of at most three axes (NCHW <->
NHWC, a matrix's transpose).  Buffers are words of the element's size (4 or 8 bytes), so that
every type of that size takes the same kernel; OpenMP threads take whole planes.
"""
from cython.parallel cimport prange
from libc.stdint cimport uint32_t, uint64_t

include "thresholds.pxi"

cdef extern from "transpose.h" nogil:
    void mt_transpose_plane_u32(const uint32_t* src, uint32_t* dst, long rows, long cols)
    void mt_transpose_plane_u64(const uint64_t* src, uint64_t* dst, long rows, long cols)

ctypedef fused word:
    uint32_t
    uint64_t


def transpose_planes(const word[::1] src, word[::1] dst, Py_ssize_t batches, Py_ssize_t rows, Py_ssize_t cols,
                     int num_threads):
    """dst[b, j, i] = src[b, i, j] for the (batches, rows, cols) array in src and the
    (batches, cols, rows) one in dst."""
    cdef Py_ssize_t plane = rows * cols, b
    if batches < 0 or rows < 0 or cols < 0 or src.shape[0] != batches * plane or dst.shape[0] != batches * plane:
        raise ValueError(f"transpose_planes: buffers of {src.shape[0]} and {dst.shape[0]} words for "
                         f"{batches} planes of {rows} x {cols}")
    if plane == 0:
        return
    for b in prange(batches, nogil=True, schedule="static",
                    num_threads=threads_for(batches * plane, num_threads, MT_MIN_PARALLEL_ELEMENTWISE)):
        if word is uint32_t:
            mt_transpose_plane_u32(&src[b * plane], &dst[b * plane], rows, cols)
        else:
            mt_transpose_plane_u64(&src[b * plane], &dst[b * plane], rows, cols)
