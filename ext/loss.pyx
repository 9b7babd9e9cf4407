# cython: language_level=3
"""Softmax cross-entropy gradient: d_logits = (exp(log_prob) - onehot(label)) * coef, over a
contiguous (N, C, D) view; coef (N, D) already folds in dY, class weights, ignore_index and the
reduction's scale."""
from cython.parallel cimport prange
from libc.stdint cimport int64_t
from libc.math cimport exp, expf

include "thresholds.pxi"

ctypedef fused real:
    float
    double


cdef inline real _exp(real v) noexcept nogil:
    if real is float:
        return expf(v)
    return exp(v)


def softmax_cross_entropy_grad(const real[:, :, ::1] log_prob, const int64_t[:, ::1] labels,
                               const real[:, ::1] coef, real[:, :, ::1] out, int num_threads):
    cdef Py_ssize_t N = log_prob.shape[0], C = log_prob.shape[1], D = log_prob.shape[2]
    cdef Py_ssize_t n, c, d
    cdef real w
    for n in prange(N, nogil=True, schedule="static",
                    num_threads=threads_for(N * C * D, num_threads, MT_MIN_PARALLEL_ELEMENTWISE)):
        for c in range(C):
            for d in range(D):
                out[n, c, d] = _exp(log_prob[n, c, d]) * coef[n, d]
        for d in range(D):
            if labels[n, d] >= 0 and labels[n, d] < C:
                out[n, labels[n, d], d] = out[n, labels[n, d], d] - coef[n, d]
