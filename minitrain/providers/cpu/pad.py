"""CPU kernels of Pad and PadGrad (NumPy): each axis maps output positions to input positions
(ops.pad.source_positions); PadGrad adds dY back along those maps, one padded axis at a time."""
import numpy as np

from ...ops.pad import MODES, WRAP_MODES, full_pads, padded_shape, source_positions
from ...ops.schema import DATA_TYPES, FLOAT_TYPES, MS_DOMAIN
from ...registry import register_kernel


def _ints(value):
    return None if value is None else [int(v) for v in value.reshape(-1)]


def _pad(ctx, pads, axes, value, modes):
    x, mode = ctx.inputs[0], ctx.attrs["mode"]
    if mode not in modes:
        ctx.fail(f"attribute 'mode'={mode!r} is not one of {list(modes)}")
    pairs = full_pads(ctx.fail, x.ndim, pads, axes)
    shape = padded_shape(ctx.fail, x.shape, pairs, mode)
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
    if ctx.attrs["pads"] is None:
        ctx.fail("attribute 'pads' is required")
    return _pad(ctx, ctx.attrs["pads"], None, ctx.attrs["value"], MODES)


def _pad_inputs(ctx, modes):
    inputs = list(ctx.inputs) + [None] * (4 - len(ctx.inputs))
    value = inputs[2]
    if value is not None and value.size != 1:
        ctx.fail(f"input 'constant_value' has shape {value.shape}; expected one number")
    return _pad(ctx, _ints(inputs[1]), _ints(inputs[3]), 0 if value is None else value.reshape(()), modes)


@register_kernel("Pad", since=11, end=18, dtypes=DATA_TYPES, host_inputs=(1, 3))
def pad_11(ctx):
    return _pad_inputs(ctx, MODES)


@register_kernel("Pad", since=19, dtypes=DATA_TYPES, host_inputs=(1, 3))
def pad(ctx):
    return _pad_inputs(ctx, WRAP_MODES)


@register_kernel("PadGrad", domain=MS_DOMAIN, dtypes=FLOAT_TYPES, host_inputs=(1, 2))
def pad_grad(ctx):
    dy, mode = ctx.inputs[0], ctx.attrs["mode"]
    axes = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    pairs = full_pads(ctx.fail, dy.ndim, _ints(ctx.inputs[1]), _ints(axes))
    dx = dy
    for axis, (begin, end) in enumerate(pairs):
        if begin == end == 0:
            continue
        size = dy.shape[axis] - begin - end
        if size < 0 or size == 0 and mode != "constant":
            ctx.fail(f"input 'dY' of shape {dy.shape} is too narrow for the pads ({begin}, {end}) of axis {axis} "
                     f"in mode {mode!r}")
        source = source_positions(mode, size, begin, dy.shape[axis])
        kept = source >= 0
        rows = np.moveaxis(dx, axis, 0)
        folded = np.zeros((size,) + rows.shape[1:], dtype=dy.dtype)
        np.add.at(folded, source[kept], rows[kept])
        dx = np.moveaxis(folded, 0, axis)
    return {"dX": np.ascontiguousarray(dx) if dx is not dy else dy.copy()}
