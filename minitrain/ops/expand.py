"""Unsqueeze, Squeeze, Expand, Size and Scale (com.microsoft): what the reductions' gradients
spread dY back over the input with, as ONNX Runtime's builders do, and what indexing a Tensor
with an int or None lowers to.

Unsqueeze inserts dims of 1 at `axes` (an attribute up to opset 12, an int64 input from 13),
each axis counted in the output's rank; Squeeze removes the dims of 1 at `axes` (all of them
when absent).  Expand broadcasts its input against a shape, both
ways, as NumPy does.  Size is the element count as a 0-d int64.  Scale multiplies by a scalar
(or divides, with scale_down=1) of a float type or int64, so an int64 count from Size scales a
float gradient.
"""
import numpy as np

from .elementwise import reduce_to_input
from .gradients import gradient
from .schema import GRAPH_DATA_TYPES, GRAPH_FLOAT_TYPES, MS_DOMAIN, Attr, Input, schema
from .shape import reshape_back_gradient
from .shape_utils import broadcast_shapes

SCALE_TYPES = GRAPH_FLOAT_TYPES + (np.dtype(np.int64),)


def unsqueezed_shape(fail, shape, axes):
    """`shape` with a 1 inserted at each of `axes` (counted in the output's rank); `fail`
    raises naming the op when an axis is out of range or repeated."""
    rank = len(shape) + len(axes)
    bad = [a for a in axes if not -rank <= a < rank]
    if bad:
        fail(f"axes {tuple(axes)} hold {bad[0]}, out of range for an output of rank {rank}: "
             f"expected [{-rank}, {rank - 1}]")
    normal = {a + rank if a < 0 else a for a in axes}
    if len(normal) != len(axes):
        fail(f"axes {tuple(axes)} name an axis twice")
    dims = iter(shape)
    return tuple(1 if i in normal else next(dims) for i in range(rank))


def infer_unsqueeze(ctx):
    if ctx.schema.since_version < 13:
        axes = ctx.attrs["axes"]
        if axes is None:
            ctx.attr_fail("axes", "is required")
    else:
        ctx.require_rank(1, 1)
        axes = ctx.input(1).value
    if axes is None or ctx.shape(0) is None:
        return [ctx.out(None)]
    return [ctx.out(unsqueezed_shape(ctx.fail, ctx.shape(0), axes))]


for _v in (1, 11):
    schema("Unsqueeze", since=_v, inputs=["data"], outputs=["expanded"],
           attrs={"axes": Attr("ints")}, float_types=GRAPH_DATA_TYPES)(infer_unsqueeze)
schema("Unsqueeze", since=13, inputs=["data", Input("axes", types=(np.int64,))],
       outputs=["expanded"], float_types=GRAPH_DATA_TYPES)(infer_unsqueeze)
gradient("Unsqueeze", since=1, emits=("Reshape", "Shape"))(reshape_back_gradient)


def squeezed_shape(fail, shape, axes):
    """`shape` without the dims at `axes` (every dim of 1 when None); `fail` raises naming the op
    when an axis is out of range, repeated or not of size 1.  None when a symbolic dim leaves
    the answer open."""
    rank = len(shape)
    if axes is None:
        if any(not isinstance(d, int) for d in shape):
            return None
        return tuple(d for d in shape if d != 1)
    bad = [a for a in axes if not -rank <= a < rank]
    if bad:
        fail(f"axes {tuple(axes)} hold {bad[0]}, out of range for an input of rank {rank}: "
             f"expected [{-rank}, {rank - 1}]")
    normal = {a + rank if a < 0 else a for a in axes}
    if len(normal) != len(axes):
        fail(f"axes {tuple(axes)} name an axis twice")
    wide = [a for a in sorted(normal) if isinstance(shape[a], int) and shape[a] != 1]
    if wide:
        fail(f"axes {tuple(axes)} name dim {wide[0]} of input {tuple(shape)}, which is not 1")
    return tuple(d for i, d in enumerate(shape) if i not in normal)


def infer_squeeze(ctx):
    if ctx.schema.since_version < 13:
        axes, known = ctx.attrs["axes"], True
    else:
        ctx.require_rank(1, 1)
        axes_type = ctx.input(1)
        axes, known = (None, True) if axes_type is None else (axes_type.value, axes_type.value is not None)
    if not known or ctx.shape(0) is None:
        return [ctx.out(None)]
    return [ctx.out(squeezed_shape(ctx.fail, ctx.shape(0), axes))]


for _v in (1, 11):
    schema("Squeeze", since=_v, inputs=["data"], outputs=["squeezed"], attrs={"axes": Attr("ints")},
           float_types=GRAPH_DATA_TYPES)(infer_squeeze)
schema("Squeeze", since=13, inputs=["data", Input("axes", types=(np.int64,), optional=True)],
       outputs=["squeezed"], float_types=GRAPH_DATA_TYPES)(infer_squeeze)
gradient("Squeeze", since=1, emits=("Reshape", "Shape"))(reshape_back_gradient)


def infer_expand(ctx):
    """The input broadcast against the shape (known when the shape input is a constant)."""
    ctx.require_rank(1, 1)
    target = ctx.input(1).value
    if target is None or ctx.shape(0) is None:
        return [ctx.out(None)]
    if any(d < 0 for d in target):
        ctx.fail(f"input 'shape' {tuple(target)} holds a negative dim")
    return [ctx.out(broadcast_shapes(ctx, [ctx.shape(0), tuple(target)]))]


for _v in (8, 13):
    schema("Expand", since=_v, inputs=["input", Input("shape", types=(np.int64,))],
           float_types=GRAPH_DATA_TYPES)(infer_expand)


@gradient("Expand", since=8, emits=("Identity", "Shape", "SumToShape"))
def expand_gradient(g):
    reduce_to_input(g, g.GO(0), 0)


def infer_size(ctx):
    return [ctx.out((), np.int64)]


for _v in (1, 13, 19):
    schema("Size", since=_v, inputs=["data"], outputs=["size"], float_types=GRAPH_DATA_TYPES)(infer_size)


@schema("Scale", domain=MS_DOMAIN, inputs=["input", Input("scale", types=SCALE_TYPES)], outputs=["output"],
        attrs={"scale_down": Attr("int", 0)})
def infer_scale(ctx):
    """output = input * scale, or input / scale with scale_down=1; scale holds one number."""
    if ctx.attrs["scale_down"] not in (0, 1):
        ctx.attr_fail("scale_down", "must be 0 or 1")
    ctx.require_scalar(1, "one number scales the whole input")
    return [ctx.out(ctx.shape(0))]
