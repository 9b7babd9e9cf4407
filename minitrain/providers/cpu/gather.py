"""CPU kernels of Gather and GatherGrad (NumPy take and add.at)."""
import numpy as np

from ...ops.gather import check_indices
from ...ops.schema import DATA_TYPES, FLOAT_TYPES, MS_DOMAIN
from ...registry import register_kernel


def _axis(ctx, rank):
    axis = ctx.attrs["axis"]
    if not -rank <= axis < rank:
        ctx.fail(f"attribute 'axis'={axis} is out of range for data of rank {rank}")
    return axis + rank if axis < 0 else axis


@register_kernel("Gather", since=1, dtypes=DATA_TYPES)
def gather(ctx):
    data, indices = ctx.inputs
    if data.ndim == 0:
        ctx.fail("input 'data' is 0-d; Gather needs an axis")
    axis = _axis(ctx, data.ndim)
    index = check_indices(ctx.fail, indices, data.shape[axis])
    return {"output": np.asarray(np.take(data, index, axis=axis))}


@register_kernel("GatherGrad", domain=MS_DOMAIN, dtypes=FLOAT_TYPES, host_inputs=(0,))
def gather_grad(ctx):
    shape, indices, dy = ctx.inputs
    shape = tuple(int(d) for d in shape.reshape(-1))
    if not shape or any(d < 0 for d in shape):
        ctx.fail(f"input 'shape' {shape} is not the shape of a Gather's data")
    axis = _axis(ctx, len(shape))
    index = check_indices(ctx.fail, indices, shape[axis])
    expected = shape[:axis] + index.shape + shape[axis + 1:]
    if dy.shape != expected:
        ctx.fail(f"input 'dY' has shape {dy.shape}; expected {expected} (the gather of data of shape {shape})")
    dx = np.zeros(shape, dtype=dy.dtype)
    moved = np.moveaxis(dx, axis, 0)
    rows = np.moveaxis(dy.reshape(shape[:axis] + (index.size,) + shape[axis + 1:]), axis, 0)
    np.add.at(moved, index.reshape(-1), rows)
    return {"dX": dx}
