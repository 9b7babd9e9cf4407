"""CPU kernels of Pad and PadGrad (NumPy): each axis maps output positions to input positions
(ops.pad.source_positions); PadGrad adds dY back along those maps, one padded axis at a time."""
import numpy as np

from ...ops.pad import MODES, WRAP_MODES, pad_arguments, pad_grad_axes, source_positions
from ...ops.schema import DATA_TYPES, FLOAT_TYPES, MS_DOMAIN
from ...registry import register_kernel


def _pad(ctx, modes):
    x = ctx.inputs[0]
    mode, pairs, shape, value = pad_arguments(ctx, modes)
    if mode == "constant":
        y = np.full(shape, value, dtype=x.dtype)
        lengths = [max(d - max(-b, 0) - max(-e, 0), 0) for d, (b, e) in zip(x.shape, pairs)]
        y[tuple(slice(max(b, 0), max(b, 0) + n) for (b, _), n in zip(pairs, lengths))] = \
            x[tuple(slice(max(-b, 0), max(-b, 0) + n) for (b, _), n in zip(pairs, lengths))]
        return {"output": y}
    maps = [source_positions(mode, d, b, n) for d, (b, _), n in zip(x.shape, pairs, shape)]
    return {"output": np.ascontiguousarray(x[np.ix_(*maps)]) if x.ndim else x.copy()}


@register_kernel("Pad", since=2, end=10, dtypes=DATA_TYPES)
def pad_attributes(ctx):
    return _pad(ctx, MODES)


@register_kernel("Pad", since=11, end=18, dtypes=DATA_TYPES, host_inputs=(1, 3))
def pad_11(ctx):
    return _pad(ctx, MODES)


@register_kernel("Pad", since=19, dtypes=DATA_TYPES, host_inputs=(1, 3))
def pad(ctx):
    return _pad(ctx, WRAP_MODES)


@register_kernel("PadGrad", domain=MS_DOMAIN, dtypes=FLOAT_TYPES, host_inputs=(1, 2))
def pad_grad(ctx):
    dy, mode = ctx.inputs[0], ctx.attrs["mode"]
    dx = dy
    for axis, begin, size in pad_grad_axes(ctx):
        source = source_positions(mode, size, begin, dy.shape[axis])
        kept = source >= 0
        rows = np.moveaxis(dx, axis, 0)
        folded = np.zeros((size,) + rows.shape[1:], dtype=dy.dtype)
        np.add.at(folded, source[kept], rows[kept])
        dx = np.moveaxis(folded, 0, axis)
    return {"dX": np.ascontiguousarray(dx) if dx is not dy else dy.copy()}
