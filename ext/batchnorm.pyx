# cython: language_level=3
"""Batch normalisation over a contiguous (N, C, D) buffer: element (n, c, d) sits at
(n * C + c) * D + d, D the product of the spatial dims (1 for (N, C) input).

One call does a whole node: ext/batchnorm.h takes a unit of channels at a time (one channel
of large planes, a block of channels of small ones), its sums, its coefficients, the
elementwise pass that uses them while its planes are still in cache, and its per-channel
outputs (statistics, running averages, dscale, dbias), so a call allocates nothing.  Units run
in parallel; sums run in double in an order fixed by the shape alone, so results do not depend
on the thread count.
"""
from cython.parallel cimport prange, threadid
from libc.math cimport INFINITY

import numpy as np

ctypedef fused real:
    float
    double


include "thresholds.pxi"

cdef extern from "batchnorm.h":
    Py_ssize_t mt_bn_unit_channels(Py_ssize_t d) noexcept nogil
    void mt_bn_forward_f(const float* x, float* y, Py_ssize_t n, Py_ssize_t c, Py_ssize_t d, Py_ssize_t c0,
                         Py_ssize_t c1, const float* scale, const float* bias, const float* input_mean,
                         const float* input_var, double epsilon, double momentum, int training,
                         float* saved_mean, float* saved_inv_std, float* running_mean,
                         float* running_var) noexcept nogil
    void mt_bn_forward_d(const double* x, double* y, Py_ssize_t n, Py_ssize_t c, Py_ssize_t d, Py_ssize_t c0,
                         Py_ssize_t c1, const double* scale, const double* bias, const double* input_mean,
                         const double* input_var, double epsilon, double momentum, int training,
                         double* saved_mean, double* saved_inv_std, double* running_mean,
                         double* running_var) noexcept nogil
    void mt_bn_backward_f(const float* dy, const float* a, int act, float low, float high, float* scratch,
                          const float* x, float* dx,
                          Py_ssize_t n, Py_ssize_t c, Py_ssize_t d, Py_ssize_t c0, Py_ssize_t c1,
                          const float* scale, const float* mean, const float* inv_std, int training,
                          float* dscale, float* dbias) noexcept nogil
    void mt_bn_backward_d(const double* dy, const double* a, int act, double low, double high, double* scratch,
                          const double* x, double* dx, Py_ssize_t n, Py_ssize_t c, Py_ssize_t d, Py_ssize_t c0, Py_ssize_t c1,
                          const double* scale, const double* mean, const double* inv_std, int training,
                          double* dscale, double* dbias) noexcept nogil
    int MT_BN_ACT_NONE, MT_BN_ACT_RELU, MT_BN_ACT_HARD_SWISH, MT_BN_ACT_CLIP


cdef inline int _threads(Py_ssize_t work, int num_threads) noexcept nogil:
    return threads_for(work, num_threads, MT_MIN_PARALLEL_ELEMENTWISE)


def forward(const real[::1] x, real[::1] y, Py_ssize_t n, Py_ssize_t c, Py_ssize_t d,
            const real[::1] scale, const real[::1] bias, const real[::1] input_mean,
            const real[::1] input_var, double epsilon, double momentum, bint training,
            real[::1] saved_mean, real[::1] saved_inv_std, real[::1] running_mean,
            real[::1] running_var, int num_threads):
    """BatchNormalization of the (n, c, d) buffer x into y (ext/batchnorm.h's mt_bn_forward):
    batch statistics and running averages when training, input_mean and input_var otherwise
    (running_* untouched).  Units of a channel or a block of channels in parallel."""
    cdef Py_ssize_t unit = mt_bn_unit_channels(d), units = (c + unit - 1) // unit, u, c0, c1
    if c == 0:
        return
    for u in prange(units, nogil=True, schedule="static", num_threads=_threads(n * c * d, num_threads)):
        c0 = u * unit
        c1 = min(c0 + unit, c)
        if real is float:
            mt_bn_forward_f(&x[0], &y[0], n, c, d, c0, c1, &scale[0], &bias[0], &input_mean[0], &input_var[0],
                            epsilon, momentum, training, &saved_mean[0], &saved_inv_std[0], &running_mean[0],
                            &running_var[0])
        else:
            mt_bn_forward_d(&x[0], &y[0], n, c, d, c0, c1, &scale[0], &bias[0], &input_mean[0], &input_var[0],
                            epsilon, momentum, training, &saved_mean[0], &saved_inv_std[0], &running_mean[0],
                            &running_var[0])


# The activations whose gradient backward() can take in first (BatchNormActivationGrad).
ACTIVATIONS = {"Relu": MT_BN_ACT_RELU, "HardSwish": MT_BN_ACT_HARD_SWISH, "Clip": MT_BN_ACT_CLIP}


def backward(const real[::1] dy, const real[::1] x, real[::1] dx, Py_ssize_t n, Py_ssize_t c, Py_ssize_t d,
             const real[::1] scale, const real[::1] mean, const real[::1] inv_std, bint training,
             real[::1] dscale, real[::1] dbias, int num_threads, str activation=None, const real[::1] a=None,
             double low=-INFINITY, double high=INFINITY):
    """BatchNormalizationGrad (ext/batchnorm.h's mt_bn_backward): dscale and dbias when they are
    given (not None), dx when it is given; the batch statistics' paths when training.  With an
    `activation` (a key of ACTIVATIONS), dy is the gradient of that activation's output and `a`
    its input (Clip's bounds `low` and `high`), and BatchNormalizationGrad's dY is the
    activation's gradient, never written out."""
    cdef Py_ssize_t unit = mt_bn_unit_channels(d), units = (c + unit - 1) // unit, u, c0, c1
    cdef real* dx_data = NULL if dx is None else &dx[0]
    cdef real* dscale_data = NULL if dscale is None else &dscale[0]
    cdef real* dbias_data = NULL if dbias is None else &dbias[0]
    cdef int act = MT_BN_ACT_NONE if activation is None else ACTIVATIONS[activation]
    cdef int threads = _threads(n * c * d, num_threads)
    cdef const real* a_data = &dy[0]
    cdef real[:, ::1] scratch
    cdef real* scratch_data = NULL
    if c == 0:
        return
    if act != MT_BN_ACT_NONE:
        if a is None or a.shape[0] != dy.shape[0]:
            raise ValueError(f"batchnorm.backward: the activation's input has {0 if a is None else a.shape[0]} "
                             f"elements, dy {dy.shape[0]}")
        a_data = &a[0]
        scratch = np.empty((threads, n * min(unit, c) * d), dtype=np.float32 if real is float else np.float64)
    for u in prange(units, nogil=True, schedule="static", num_threads=threads):
        c0 = u * unit
        c1 = min(c0 + unit, c)
        if act != MT_BN_ACT_NONE:
            scratch_data = &scratch[threadid(), 0]
        if real is float:
            mt_bn_backward_f(&dy[0], a_data, act, <float>low, <float>high, scratch_data, &x[0], dx_data, n, c, d, c0,
                             c1, &scale[0], &mean[0], &inv_std[0], training, dscale_data, dbias_data)
        else:
            mt_bn_backward_d(&dy[0], a_data, act, low, high, scratch_data, &x[0], dx_data, n, c, d, c0, c1,
                             &scale[0], &mean[0], &inv_std[0], training, dscale_data, dbias_data)
