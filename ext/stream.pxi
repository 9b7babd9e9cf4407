# Cython declarations of ext/stream.h and ext/grad_stream.h (streaming-store loops of the
# memory-bound gradients), included by the kernels that stream their output.
cdef extern from "grad_stream.h":
    enum:
        MT_GRAD_RELU
        MT_GRAD_LEAKY_RELU
        MT_GRAD_SIGMOID
        MT_GRAD_TANH
        MT_GRAD_SOFTMAX
        MT_GRAD_LOG_SOFTMAX
        MT_GRAD_NONE
    Py_ssize_t mt_stream_head(const void* dst, Py_ssize_t n, size_t elsize) noexcept nogil
    void mt_stream_fence() noexcept nogil
    Py_ssize_t mt_grad_stream_f(int op, const float* dy, const float* v, float* dx, Py_ssize_t n,
                                float a) noexcept nogil
    Py_ssize_t mt_grad_stream_d(int op, const double* dy, const double* v, double* dx, Py_ssize_t n,
                                double a) noexcept nogil
