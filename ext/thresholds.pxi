# Cython declarations of ext/thresholds.h (the parallel thresholds of every kernel) and the one
# rule that applies them.
cdef extern from "thresholds.h":
    enum:
        MT_MIN_PARALLEL_GATHER
        MT_MIN_PARALLEL_ELEMENTWISE
        MT_MIN_PARALLEL_REDUCE
        MT_MIN_PARALLEL_UPDATE
        MT_MIN_PARALLEL_STREAM
        MT_MIN_PARALLEL_DEPTHWISE_MACS
        MT_MIN_PARALLEL_GEMM_MACS
        MT_MIN_SPLIT_GEMM_MACS


cdef inline int threads_for(Py_ssize_t work, int num_threads, Py_ssize_t min_work) noexcept nogil:
    """num_threads (at least 1) for `work` units of work, 1 below min_work."""
    return num_threads if work >= min_work and num_threads > 1 else 1
