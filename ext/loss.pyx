# cython: language_level=3
"""Softmax cross-entropy from log-probabilities, over a contiguous (N, C, D) view with labels
(N, D): the per-sample weights (class weight of the label, 0 where ignore_index), the weighted
negative log-likelihoods and d_logits = (exp(log_prob) - onehot(label)) * coef, where coef
folds in dY, the weights and the reduction's scale.  One call serves the loss, its gradient,
or both (the fused op), so all three give the same bits."""
from cython.parallel cimport prange
from libc.stdint cimport int64_t
from libc.math cimport exp

import numpy as np

cdef extern from "fastmath.h":
    float mt_expf(float x) noexcept nogil

include "thresholds.pxi"

ctypedef fused real:
    float
    double

cdef enum:
    NONE = 0            # reductions, as minitrain/providers/cpu/loss.py numbers them
    SUM = 1
    MEAN = 2


cdef inline real _exp(real v) noexcept nogil:
    if real is float:
        return mt_expf(v)
    return exp(v)


cdef inline void _scaled_exps(const real* lp, real* out, Py_ssize_t n, real coef) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = _exp(lp[i]) * coef


cdef inline void _scaled_exp_lanes(const real* lp, real* out, Py_ssize_t n, const real* coef) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = _exp(lp[i]) * coef[i]


cdef inline real _weight(int64_t label, const real* weights, int64_t ignore_index, bint has_ignore) noexcept nogil:
    """The sample's weight: 0 where ignored, else its class weight (1 without weights)."""
    if has_ignore and label == ignore_index:
        return 0
    if weights != NULL:
        return weights[label]
    return 1


def softmax_cross_entropy(const real[:, :, ::1] log_prob, const int64_t[:, ::1] labels, const real[::1] weights,
                          int64_t ignore_index, bint has_ignore, int reduction, const real[::1] dy,
                          real[:, ::1] nll, real[:, :, ::1] d_logits, int num_threads):
    """The sample losses -log_prob[n, label, d] * w (0 where w is 0), into nll when it is not
    None; with dY (one value, or one per sample for reduction 'none') and d_logits, the
    gradient.  Returns (flat position in labels of the first label outside [0, C) that is not
    ignored, or -1; the sum of the weights; the sum of the sample losses), sums in double.
    Nothing is written when a label is bad."""
    cdef Py_ssize_t N = log_prob.shape[0], C = log_prob.shape[1], D = log_prob.shape[2]
    cdef Py_ssize_t n, d
    cdef int64_t label
    cdef double weight_sum = 0, loss_sum = 0
    cdef real w, sample
    cdef const real* wp = &weights[0] if weights is not None and weights.shape[0] else NULL
    cdef bint grad = d_logits is not None
    cdef real[:, ::1] coef
    if labels.shape[0] != N or labels.shape[1] != D or (weights is not None and weights.shape[0] != C) \
            or (nll is not None and (nll.shape[0] != N or nll.shape[1] != D)):
        raise ValueError("softmax_cross_entropy: buffer shapes disagree")
    if grad and (dy is None or d_logits.shape[0] != N or d_logits.shape[1] != C or d_logits.shape[2] != D
                 or dy.shape[0] != (N * D if reduction == NONE else 1)):
        raise ValueError("softmax_cross_entropy: gradient buffers disagree")
    for n in range(N):
        for d in range(D):
            label = labels[n, d]
            if (label < 0 or label >= C) and not (has_ignore and label == ignore_index):
                return n * D + d, 0.0, 0.0
    coef = np.empty((N, D), dtype=np.float32 if real is float else np.float64) if grad else None
    with nogil:
        for n in range(N):
            for d in range(D):
                label = labels[n, d]
                w = _weight(label, wp, ignore_index, has_ignore)
                weight_sum = weight_sum + w
                sample = -log_prob[n, label, d] * w if w != 0 else 0
                loss_sum = loss_sum + sample
                if nll is not None:
                    nll[n, d] = sample
                if grad:
                    coef[n, d] = w
        if grad:
            _gradient(log_prob, labels, dy, coef, d_logits, reduction, weight_sum, num_threads)
    return -1, weight_sum, loss_sum


cdef void _gradient(const real[:, :, ::1] log_prob, const int64_t[:, ::1] labels, const real[::1] dy,
                    real[:, ::1] coef, real[:, :, ::1] d_logits, int reduction, double weight_sum,
                    int num_threads) noexcept nogil:
    """d_logits from coef holding the sample weights (scaled here by dY and the reduction)."""
    cdef Py_ssize_t N = log_prob.shape[0], C = log_prob.shape[1], D = log_prob.shape[2]
    cdef Py_ssize_t n, c, d
    cdef int64_t label
    cdef real scale = 0
    if reduction != NONE:
        scale = dy[0] / <real>weight_sum if reduction == MEAN else dy[0]
    for n in range(N):
        for d in range(D):
            coef[n, d] = coef[n, d] * (dy[n * D + d] if reduction == NONE else scale)
    for n in prange(N, schedule="static",
                    num_threads=threads_for(N * C * D, num_threads, MT_MIN_PARALLEL_ELEMENTWISE)):
        if D == 1:
            _scaled_exps(&log_prob[n, 0, 0], &d_logits[n, 0, 0], C, coef[n, 0])
        else:
            for c in range(C):
                _scaled_exp_lanes(&log_prob[n, c, 0], &d_logits[n, c, 0], D, &coef[n, 0])
        for d in range(D):
            label = labels[n, d]
            if label >= 0 and label < C:
                d_logits[n, label, d] = d_logits[n, label, d] - coef[n, d]
