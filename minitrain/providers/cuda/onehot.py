"""CUDA kernels of OneHot (cuda/onehot.cu), keyed by the dtype of `values` as the CPU's are;
depth is read from host memory, the indices and values stay on the device."""
import math

import numpy as np

from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel

_ONE_HOT = {np.dtype(t): Kernel("onehot", f"one_hot_{name}", "PPPqqqi")
            for t, name in ((np.int64, "i64"), (np.int32, "i32"))}


def _one_hot(ctx, negative_from_end):
    indices, depth, values = ctx.inputs
    if depth.size != 1:
        ctx.fail(f"input 'depth' has shape {depth.shape}; expected a scalar")
    if tuple(values.shape) != (2,):
        ctx.fail(f"input 'values' has shape {values.shape}; expected (2,): [off_value, on_value]")
    depth = int(depth.reshape(()))
    if depth <= 0:
        ctx.fail(f"input 'depth' is {depth}; expected a positive number of classes")
    rank = indices.ndim + 1
    axis = ctx.attrs["axis"]
    if not -rank <= axis < rank:
        ctx.fail(f"attribute 'axis'={axis} is out of range for an output of rank {rank}")
    axis = axis + rank if axis < 0 else axis
    shape = tuple(indices.shape[:axis]) + (depth,) + tuple(indices.shape[axis:])
    y = ctx.provider.empty(shape, values.dtype)
    if y.size:
        _ONE_HOT[np.dtype(indices.dtype)].launch_elements(ctx.provider, values.dtype, y.size, indices, values, y,
                                                          y.size, depth, math.prod(indices.shape[axis:]),
                                                          int(negative_from_end))
    return {"output": y}


@register_kernel("OneHot", since=9, end=10, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
def one_hot_9(ctx):
    return _one_hot(ctx, negative_from_end=False)


@register_kernel("OneHot", since=11, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
def one_hot(ctx):
    return _one_hot(ctx, negative_from_end=True)
