"""The float or double build of a Cython fused-type entry point, picked by element type: a call
through the fused function first matches its arguments against each signature, which costs a
few microseconds, as long as a small tensor's whole kernel."""
import functools

import numpy as np

_SPECIALIZATIONS = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


@functools.lru_cache(maxsize=256)
def specialized(function, dtype):
    """`function`'s specialization for arrays of `dtype` (float32 or float64)."""
    return function[_SPECIALIZATIONS[np.dtype(dtype)]]
