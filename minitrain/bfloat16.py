"""bfloat16 on the host, through ml_dtypes.

NumPy has no bfloat16.  ml_dtypes (the package JAX, ONNX and TensorFlow take it from) registers
one with NumPy: its arrays cast to and from the other float types with round-to-nearest-even,
print, compare and copy like any array, and export the plain contiguous buffer that device
copies read.  A type of minitrain's own would have to re-implement all of that, and the arrays
a user hands in or gets back would not be the ones their other tools know.

ml_dtypes is an optional dependency (the `cuda` extra): the CUDA provider has bfloat16 kernels,
the CPU provider has none.  Without ml_dtypes there is no bfloat16 array to run, BFLOAT16 is
None and BFLOAT16_TYPES is empty.  NumPy files bfloat16 under kind "V" (no np.floating
subclass): ask `is_float`, not `dtype.kind == "f"`, whether a dtype is a float type.
"""
from __future__ import annotations

import numpy as np

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

BFLOAT16 = np.dtype(ml_dtypes.bfloat16) if ml_dtypes is not None else None
BFLOAT16_TYPES = () if BFLOAT16 is None else (BFLOAT16,)


def is_float(dtype):
    """Whether `dtype` is a float element type: float16/32/64, or bfloat16."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype in BFLOAT16_TYPES
