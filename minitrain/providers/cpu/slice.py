"""CPU kernels of Slice (attribute and input forms) and SliceGrad (NumPy basic indexing)."""
import numpy as np

from ...ops.schema import DATA_TYPES, MS_DOMAIN
from ...ops.slice import slice_ranges
from ...registry import register_kernel


def _index_inputs(inputs):
    """starts, ends, axes, steps from the index inputs (None where absent)."""
    return [None if v is None else [int(a) for a in v.reshape(-1)] for v in (list(inputs) + [None] * 4)[:4]]


@register_kernel("Slice", since=1, end=9, dtypes=DATA_TYPES)
def slice_attributes(ctx):
    x = ctx.inputs[0]
    ranges = slice_ranges(ctx.fail, x.shape, ctx.attrs["starts"], ctx.attrs["ends"], ctx.attrs["axes"])
    return {"output": np.ascontiguousarray(x[ranges])}


@register_kernel("Slice", since=10, dtypes=DATA_TYPES, host_inputs=(1, 2, 3, 4))
def slice_(ctx):
    x = ctx.inputs[0]
    ranges = slice_ranges(ctx.fail, x.shape, *_index_inputs(ctx.inputs[1:]))
    return {"output": np.ascontiguousarray(x[ranges])}


@register_kernel("SliceGrad", domain=MS_DOMAIN, host_inputs=(1, 2, 3, 4, 5))
def slice_grad(ctx):
    dy, shape = ctx.inputs[0], tuple(int(d) for d in ctx.inputs[1])
    if any(d < 0 for d in shape):
        ctx.fail(f"input 'shape' {shape} holds a negative dim")
    ranges = slice_ranges(ctx.fail, shape, *_index_inputs(ctx.inputs[2:]))
    dx = np.zeros(shape, dtype=dy.dtype)
    if dx[ranges].shape != dy.shape:
        ctx.fail(f"input 'dY' has shape {dy.shape}; expected {dx[ranges].shape} (the slice of an input of "
                 f"shape {shape})")
    dx[ranges] = dy
    return {"dX": dx}
