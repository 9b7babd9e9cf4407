"""CPU kernels of OneHot (NumPy), keyed by the dtype of `values`."""
import numpy as np

from ...registry import register_kernel


def _one_hot(ctx, negative_from_end):
    indices, depth, values = ctx.inputs
    if depth.size != 1:
        ctx.fail(f"input 'depth' has shape {depth.shape}; expected a scalar")
    if values.shape != (2,):
        ctx.fail(f"input 'values' has shape {values.shape}; expected (2,): [off_value, on_value]")
    depth = int(depth.reshape(()))
    if depth <= 0:
        ctx.fail(f"input 'depth' is {depth}; expected a positive number of classes")
    index = indices.astype(np.int64)
    if negative_from_end:
        index = np.where(index < 0, index + depth, index)
    hits = index[..., None] == np.arange(depth)
    out = np.where(hits, values[1], values[0]).astype(values.dtype, copy=False)
    axis = ctx.attrs["axis"] + out.ndim if ctx.attrs["axis"] < 0 else ctx.attrs["axis"]
    return {"output": np.ascontiguousarray(np.moveaxis(out, -1, axis))}


@register_kernel("OneHot", since=9, end=10, host_inputs=(1,))
def one_hot_9(ctx):
    return _one_hot(ctx, negative_from_end=False)


@register_kernel("OneHot", since=11, host_inputs=(1,))
def one_hot(ctx):
    return _one_hot(ctx, negative_from_end=True)
