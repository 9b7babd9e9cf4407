"""CPU kernels of Slice (attribute and input forms) and SliceGrad (NumPy basic indexing).

The index ranges depend only on the input's shape and the index values, which a training step
feeds the same every time: they are worked out once per signature (plan_cache.py)."""
import numpy as np

from ...ops.schema import DATA_TYPES, MS_DOMAIN
from ...ops.slice import slice_ranges
from ...registry import register_kernel
from ..plan_cache import cached_plan


def _index_inputs(inputs):
    """starts, ends, axes, steps from the index inputs (None where absent), as tuples."""
    return tuple(None if v is None else tuple(v.reshape(-1).tolist()) for v in (list(inputs) + [None] * 4)[:4])


def _ranges(ctx, shape, index):
    """slice_ranges of `shape` and the index lists, cached."""
    return cached_plan(ctx, "Slice", (shape, index), lambda: slice_ranges(ctx.fail, shape, *index))


@register_kernel("Slice", since=1, end=9, dtypes=DATA_TYPES)
def slice_attributes(ctx):
    x = ctx.inputs[0]
    ranges = slice_ranges(ctx.fail, x.shape, ctx.attrs["starts"], ctx.attrs["ends"], ctx.attrs["axes"])
    return {"output": np.ascontiguousarray(x[ranges])}


@register_kernel("Slice", since=10, dtypes=DATA_TYPES, host_inputs=(1, 2, 3, 4))
def slice_(ctx):
    x = ctx.inputs[0]
    return {"output": np.ascontiguousarray(x[_ranges(ctx, x.shape, _index_inputs(ctx.inputs[1:]))])}


@register_kernel("SliceGrad", domain=MS_DOMAIN, host_inputs=(1, 2, 3, 4, 5))
def slice_grad(ctx):
    dy, shape, index = ctx.inputs[0], tuple(ctx.inputs[1].tolist()), _index_inputs(ctx.inputs[2:])
    ranges, cut = cached_plan(ctx, "SliceGrad", (shape, index), lambda: _slice_grad_plan(ctx, shape, index))
    dx = np.zeros(shape, dtype=dy.dtype) if cut is None else np.empty(shape, dtype=dy.dtype)
    if dx[ranges].shape != dy.shape:
        ctx.fail(f"input 'dY' has shape {dy.shape}; expected {dx[ranges].shape} (the slice of an input of "
                 f"shape {shape})")
    if cut is not None:     # zero only what the slice leaves out, before and after it
        axis, begin, end = cut
        dx[(slice(None),) * axis + (slice(0, begin),)] = 0
        dx[(slice(None),) * axis + (slice(end, None),)] = 0
    dx[ranges] = dy
    return {"dX": dx}


def _slice_grad_plan(ctx, shape, index):
    """(the ranges, _cut_axis of them) for dX of `shape`; fails on a negative dim."""
    if any(d < 0 for d in shape):
        ctx.fail(f"input 'shape' {shape} holds a negative dim")
    ranges = slice_ranges(ctx.fail, shape, *index)
    return ranges, _cut_axis(shape, ranges)


def _cut_axis(shape, ranges):
    """(axis, begin, end) when `ranges` take [begin, end) of one axis with step 1 and every
    other axis whole (the gradient then writes each element once); else None."""
    cut = None
    for axis, (d, r) in enumerate(zip(shape, ranges)):
        begin, end, step = r.indices(d)
        if (begin, end, step) == (0, d, 1):
            continue
        if step != 1 or cut is not None:
            return None
        cut = (axis, begin, max(begin, end))
    return cut
