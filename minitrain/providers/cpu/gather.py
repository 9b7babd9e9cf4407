"""CPU kernels of Gather and GatherGrad (NumPy take and add.at)."""
import numpy as np

from ...ops.gather import gather_grad_plan, gather_plan
from ...ops.schema import DATA_TYPES, FLOAT_TYPES, MS_DOMAIN
from ...registry import register_kernel


@register_kernel("Gather", since=1, dtypes=DATA_TYPES)
def gather(ctx):
    data, indices = ctx.inputs
    axis, index = gather_plan(ctx.fail, ctx.attrs["axis"], data.shape, indices)
    return {"output": np.asarray(np.take(data, index, axis=axis))}


@register_kernel("GatherGrad", domain=MS_DOMAIN, dtypes=FLOAT_TYPES, host_inputs=(0,))
def gather_grad(ctx):
    shape, indices, dy = ctx.inputs
    shape, axis, index = gather_grad_plan(ctx.fail, ctx.attrs["axis"], shape, indices, dy.shape)
    dx = np.zeros(shape, dtype=dy.dtype)
    moved = np.moveaxis(dx, axis, 0)
    rows = np.moveaxis(dy.reshape(shape[:axis] + (index.size,) + shape[axis + 1:]), axis, 0)
    np.add.at(moved, index.reshape(-1), rows)
    return {"dX": dx}
