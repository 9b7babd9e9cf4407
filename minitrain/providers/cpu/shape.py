"""CPU kernels of the re-layout ops; they return views where NumPy can (no copy)."""
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
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return {"output": x.reshape(rows, -1) if rows else x.reshape(0, int(np.prod(x.shape[axis:])))}


class _ReshapeContext:
    """Adapts a KernelContext to the error helpers reshape_target expects."""

    def __init__(self, ctx):
        self.fail = ctx.fail


@register_kernel("Reshape", since=5, dtypes=DATA_TYPES)
def reshape(ctx):
    x, target = ctx.inputs[0], ctx.inputs[1]
    shape = reshape_target(_ReshapeContext(ctx), x.shape, [int(d) for d in target],
                           ctx.attrs.get("allowzero", 0))
    return {"reshaped": x.reshape(shape)}


@register_kernel("Shape", since=1, dtypes=DATA_TYPES)
def shape(ctx):
    dims = ctx.inputs[0].shape
    begin, stop = shape_slice(len(dims), ctx.attrs.get("start", 0), ctx.attrs.get("end"))
    return {"shape": np.array(dims[begin:stop], dtype=np.int64)}


@register_kernel("Transpose", since=1, dtypes=DATA_TYPES)
def transpose(ctx):
    return {"transposed": np.ascontiguousarray(np.transpose(ctx.inputs[0], ctx.attrs["perm"]))}
