"""CPU kernels of Unsqueeze, Squeeze, Expand, Size and Scale (NumPy)."""
import numpy as np

from ...ops.expand import squeezed_shape, unsqueezed_shape
from ...ops.schema import DATA_TYPES, MS_DOMAIN
from ...registry import register_kernel


@register_kernel("Unsqueeze", since=1, end=12, dtypes=DATA_TYPES)
def unsqueeze_attribute_axes(ctx):
    x = ctx.inputs[0]
    return {"expanded": x.reshape(unsqueezed_shape(ctx.fail, x.shape, ctx.attrs["axes"]))}


@register_kernel("Unsqueeze", since=13, dtypes=DATA_TYPES, host_inputs=(1,))
def unsqueeze(ctx):
    x = ctx.inputs[0]
    return {"expanded": x.reshape(unsqueezed_shape(ctx.fail, x.shape, [int(a) for a in ctx.inputs[1]]))}


@register_kernel("Squeeze", since=1, end=12, dtypes=DATA_TYPES)
def squeeze_attribute_axes(ctx):
    x = ctx.inputs[0]
    return {"squeezed": x.reshape(squeezed_shape(ctx.fail, x.shape, ctx.attrs["axes"]))}


@register_kernel("Squeeze", since=13, dtypes=DATA_TYPES, host_inputs=(1,))
def squeeze(ctx):
    x = ctx.inputs[0]
    axes = None if len(ctx.inputs) < 2 or ctx.inputs[1] is None else [int(a) for a in ctx.inputs[1]]
    return {"squeezed": x.reshape(squeezed_shape(ctx.fail, x.shape, axes))}


@register_kernel("Expand", since=8, dtypes=DATA_TYPES, host_inputs=(1,))
def expand(ctx):
    x, target = ctx.inputs[0], tuple(int(d) for d in ctx.inputs[1])
    if any(d < 0 for d in target):
        ctx.fail(f"input 'shape' {target} holds a negative dim")
    try:
        shape = np.broadcast_shapes(x.shape, target)
    except ValueError:
        ctx.fail(f"input 'input' {x.shape} does not broadcast with input 'shape' {target}")
    return {"Y": np.ascontiguousarray(np.broadcast_to(x, shape))}


@register_kernel("Size", since=1, dtypes=DATA_TYPES, host_outputs=("size",))
def size(ctx):
    return {"size": np.array(ctx.inputs[0].size, dtype=np.int64)}


@register_kernel("Scale", domain=MS_DOMAIN, host_inputs=(1,))
def scale(ctx):
    x, factor = ctx.inputs[0], ctx.dtype.type(ctx.inputs[1].reshape(()))
    return {"output": np.asarray(x / factor if ctx.attrs["scale_down"] else x * factor)}
