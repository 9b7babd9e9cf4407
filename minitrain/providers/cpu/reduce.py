"""CPU kernels of ReduceSum (NumPy): axes from the attribute (opsets 1-12) or the input (13+)."""
import numpy as np

from ...ops.reduce import reduced_axes, reduced_shape
from ...registry import register_kernel


def _reduce_sum(ctx, axes, noop_with_empty_axes):
    x = ctx.inputs[0]
    axes = reduced_axes(ctx.fail, x.ndim, axes, noop_with_empty_axes)
    if axes is None:
        return {"reduced": x}
    total = np.sum(x, axis=axes, keepdims=bool(ctx.attrs["keepdims"]), dtype=ctx.dtype)
    return {"reduced": np.asarray(total).reshape(reduced_shape(x.shape, axes, ctx.attrs["keepdims"]))}


@register_kernel("ReduceSum", since=1, end=12)
def reduce_sum_attribute_axes(ctx):
    return _reduce_sum(ctx, ctx.attrs["axes"], 0)


@register_kernel("ReduceSum", since=13, host_inputs=(1,))
def reduce_sum(ctx):
    axes = ctx.inputs[1] if len(ctx.inputs) > 1 else None
    return _reduce_sum(ctx, None if axes is None else [int(a) for a in axes.reshape(-1)],
                       ctx.attrs["noop_with_empty_axes"])
