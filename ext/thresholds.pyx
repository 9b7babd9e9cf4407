# cython: language_level=3
"""The parallel thresholds of ext/thresholds.h, for the Python side of the CPU provider: a dict
`THRESHOLDS` of name -> work count (see the header for what each counts and why)."""
include "thresholds.pxi"

THRESHOLDS = {
    "MIN_PARALLEL_GATHER": MT_MIN_PARALLEL_GATHER,
    "MIN_PARALLEL_ELEMENTWISE": MT_MIN_PARALLEL_ELEMENTWISE,
    "MIN_PARALLEL_REDUCE": MT_MIN_PARALLEL_REDUCE,
    "MIN_PARALLEL_UPDATE": MT_MIN_PARALLEL_UPDATE,
    "MIN_PARALLEL_STREAM": MT_MIN_PARALLEL_STREAM,
    "MIN_PARALLEL_DEPTHWISE_MACS": MT_MIN_PARALLEL_DEPTHWISE_MACS,
    "MIN_PARALLEL_GEMM_MACS": MT_MIN_PARALLEL_GEMM_MACS,
    "MIN_SPLIT_GEMM_MACS": MT_MIN_SPLIT_GEMM_MACS,
}
