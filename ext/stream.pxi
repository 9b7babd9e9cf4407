# Cython declarations of ext/stream.h (non-temporal block stores), included by the kernels
# that stream their output.
cdef extern from "stream.h":
    enum: MT_STREAM_BLOCK
    Py_ssize_t mt_stream_head(const void* dst, Py_ssize_t n, size_t elsize) noexcept nogil
    void mt_stream(void* dst, const void* src, Py_ssize_t n, size_t elsize) noexcept nogil
    void mt_stream_fence() noexcept nogil
