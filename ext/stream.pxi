# Cython declarations of ext/stream.h and ext/grad_stream.h (streaming-store loops of the
# memory-bound gradients), included by the kernels that stream their output.
cdef extern from "grad_stream.h":
    Py_ssize_t mt_stream_head(const void* dst, Py_ssize_t n, size_t elsize) noexcept nogil
    void mt_stream_fence() noexcept nogil
    Py_ssize_t mt_relu_grad_stream_f(const float*, const float*, float*, Py_ssize_t, float) noexcept nogil
    Py_ssize_t mt_relu_grad_stream_d(const double*, const double*, double*, Py_ssize_t, double) noexcept nogil
    Py_ssize_t mt_leaky_relu_grad_stream_f(const float*, const float*, float*, Py_ssize_t, float) noexcept nogil
    Py_ssize_t mt_leaky_relu_grad_stream_d(const double*, const double*, double*, Py_ssize_t,
                                           double) noexcept nogil
    Py_ssize_t mt_sigmoid_grad_stream_f(const float*, const float*, float*, Py_ssize_t, float) noexcept nogil
    Py_ssize_t mt_sigmoid_grad_stream_d(const double*, const double*, double*, Py_ssize_t, double) noexcept nogil
    Py_ssize_t mt_tanh_grad_stream_f(const float*, const float*, float*, Py_ssize_t, float) noexcept nogil
    Py_ssize_t mt_tanh_grad_stream_d(const double*, const double*, double*, Py_ssize_t, double) noexcept nogil
    Py_ssize_t mt_softmax_grad_stream_f(const float*, const float*, float*, Py_ssize_t, float) noexcept nogil
    Py_ssize_t mt_softmax_grad_stream_d(const double*, const double*, double*, Py_ssize_t, double) noexcept nogil
    Py_ssize_t mt_log_softmax_grad_stream_f(const float*, const float*, float*, Py_ssize_t, float) noexcept nogil
    Py_ssize_t mt_log_softmax_grad_stream_d(const double*, const double*, double*, Py_ssize_t,
                                            double) noexcept nogil
