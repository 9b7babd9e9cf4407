"""CPU kernels of Concat and Split (NumPy), for float and integer tensors."""
import numpy as np

from ...ops.concat import PIECES, concat_axis, split_plan
from ...ops.schema import DATA_TYPES
from ...registry import register_kernel


@register_kernel("Concat", since=1, dtypes=DATA_TYPES)
def concat(ctx):
    axis = concat_axis(ctx.fail, ctx.attrs["axis"], [x.shape for x in ctx.inputs])
    return {"concat_result": np.concatenate(ctx.inputs, axis=axis)}


def _split(ctx, split, version):
    x = ctx.inputs[0]
    axis, sizes = split_plan(ctx.fail, version, ctx.attrs, x.shape, split, ctx.wanted)
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
