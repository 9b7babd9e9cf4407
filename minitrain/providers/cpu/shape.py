"""CPU kernels of the re-layout ops; they return views where NumPy can (no copy)."""
import math

import numpy as np

from ...ops.schema import DATA_TYPES
from ...ops.shape import reshape_target, shape_slice
from ...registry import register_kernel


@register_kernel("Identity", since=1, dtypes=DATA_TYPES)
def identity(ctx):
    return {"output": ctx.inputs[0]}


@register_kernel("Flatten", since=1, dtypes=DATA_TYPES)
def flatten(ctx):
    x = ctx.inputs[0]
    axis = ctx.attrs["axis"] + x.ndim if ctx.attrs["axis"] < 0 else ctx.attrs["axis"]
    return {"output": x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))}


class _ReshapeContext:
    """Adapts a KernelContext to the error helpers reshape_target expects."""

    def __init__(self, ctx):
        self.fail = ctx.fail


@register_kernel("Reshape", since=5, dtypes=DATA_TYPES)
def reshape(ctx):
    x, target = ctx.inputs[0], ctx.inputs[1].tolist()
    allowzero = ctx.attrs.get("allowzero", 0)
    if (allowzero or 0 not in target) and min(target, default=0) >= -1:
        try:        # no dim copied: NumPy's rules are ONNX's; what NumPy refuses, reshape_target names
            return {"reshaped": x.reshape(target)}
        except ValueError:
            pass
    return {"reshaped": x.reshape(reshape_target(_ReshapeContext(ctx), x.shape, target, allowzero))}


@register_kernel("Shape", since=1, dtypes=DATA_TYPES)
def shape(ctx):
    dims = ctx.inputs[0].shape
    start, end = ctx.attrs.get("start", 0), ctx.attrs.get("end")
    if start or end is not None:
        begin, stop = shape_slice(len(dims), start, end)
        dims = dims[begin:stop]
    return {"shape": np.array(dims, dtype=np.int64)}


@register_kernel("Transpose", since=1, dtypes=DATA_TYPES)
def transpose(ctx):
    return {"transposed": np.ascontiguousarray(np.transpose(ctx.inputs[0], ctx.attrs["perm"]))}
