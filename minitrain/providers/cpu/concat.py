"""CPU kernels of Concat and Split (NumPy), for float and integer tensors."""
import numpy as np

from ...ops.concat import PIECES, split_count, split_sizes
from ...ops.schema import DATA_TYPES
from ...registry import register_kernel


@register_kernel("Concat", since=1, dtypes=DATA_TYPES)
def concat(ctx):
    inputs = ctx.inputs
    rank = inputs[0].ndim
    if rank == 0 or any(x.ndim != rank for x in inputs):
        ctx.fail(f"inputs have shapes {[x.shape for x in inputs]}; they need one rank of at least 1")
    axis = ctx.attrs["axis"]
    if not -rank <= axis < rank:
        ctx.fail(f"attribute 'axis'={axis} is out of range for inputs of rank {rank}")
    try:
        return {"concat_result": np.concatenate(inputs, axis=axis)}
    except ValueError:
        ctx.fail(f"inputs {[x.shape for x in inputs]} differ in a dim other than the axis {axis}")


def _split(ctx, split, version):
    x = ctx.inputs[0]
    if x.ndim == 0:
        ctx.fail("input is 0-d; Split needs an axis")
    axis = ctx.attrs["axis"]
    if not -x.ndim <= axis < x.ndim:
        ctx.fail(f"attribute 'axis'={axis} is out of range for an input of rank {x.ndim}")
    axis = axis + x.ndim if axis < 0 else axis
    count = split_count(version, ctx.attrs, split, ctx.wanted)
    beyond = [w for w in ctx.wanted if PIECES.index(w) >= count]
    if beyond:
        ctx.fail(f"makes {count} pieces; output {beyond[0]!r} is beyond them")
    sizes = split_sizes(ctx.fail, x.shape[axis], split, count)
    ends = np.cumsum(sizes)
    index = [slice(None)] * x.ndim
    out = {}
    for i, name in enumerate(PIECES[:len(sizes)]):
        if ctx.wants(name):
            index[axis] = slice(ends[i] - sizes[i], ends[i])
            out[name] = np.ascontiguousarray(x[tuple(index)])
    return out


@register_kernel("Split", since=2, end=12, dtypes=DATA_TYPES)
def split_attribute(ctx):
    return _split(ctx, ctx.attrs["split"], 2)


@register_kernel("Split", since=13, end=17, dtypes=DATA_TYPES, host_inputs=(1,))
def split_13(ctx):
    split = ctx.inputs[1] if len(ctx.inputs) > 1 else None
    return _split(ctx, None if split is None else [int(s) for s in split.reshape(-1)], 13)


@register_kernel("Split", since=18, dtypes=DATA_TYPES, host_inputs=(1,))
def split(ctx):
    split = ctx.inputs[1] if len(ctx.inputs) > 1 else None
    return _split(ctx, None if split is None else [int(s) for s in split.reshape(-1)], 18)
