"""CPU kernels of Concat and Split (NumPy), for float and integer tensors.  Concat's axis and
Split's cut depend only on the shapes, sizes and outputs wanted: checked and worked out once per
signature (plan_cache.py)."""
import numpy as np

from ...ops.concat import PIECES, concat_axis, split_plan
from ...ops.schema import DATA_TYPES
from ...registry import register_kernel
from ..plan_cache import cached_plan


@register_kernel("Concat", since=1, dtypes=DATA_TYPES)
def concat(ctx):
    shapes = tuple(x.shape for x in ctx.inputs)
    axis = cached_plan(ctx, "Concat", shapes, lambda: concat_axis(ctx.fail, ctx.attrs["axis"], shapes))
    return {"concat_result": np.concatenate(ctx.inputs, axis=axis)}


def _split(ctx, split, version):
    x = ctx.inputs[0]
    pieces = cached_plan(ctx, "Split", (version, x.shape, split, tuple(ctx.wanted)),
                         lambda: _split_pieces(ctx, split, version, x.shape))
    return {name: np.ascontiguousarray(x[index]) for name, index in pieces}


def _split_pieces(ctx, split, version, shape):
    """(output name, index) of every piece wanted: split_plan's cut as basic indexing."""
    axis, sizes = split_plan(ctx.fail, version, ctx.attrs, shape, split, ctx.wanted)
    ends = np.cumsum(sizes).tolist()
    lead = (slice(None),) * axis
    return tuple((name, lead + (slice(end - size, end),))
                 for name, size, end in zip(PIECES, sizes, ends) if ctx.wants(name))


@register_kernel("Split", since=2, end=12, dtypes=DATA_TYPES)
def split_attribute(ctx):
    split = ctx.attrs["split"]
    return _split(ctx, None if split is None else tuple(split), 2)


@register_kernel("Split", since=13, end=17, dtypes=DATA_TYPES, host_inputs=(1,))
def split_13(ctx):
    split = ctx.inputs[1] if len(ctx.inputs) > 1 else None
    return _split(ctx, None if split is None else tuple(split.reshape(-1).tolist()), 13)


@register_kernel("Split", since=18, dtypes=DATA_TYPES, host_inputs=(1,))
def split(ctx):
    split = ctx.inputs[1] if len(ctx.inputs) > 1 else None
    return _split(ctx, None if split is None else tuple(split.reshape(-1).tolist()), 18)
