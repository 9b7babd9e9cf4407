"""Slice: the sub-tensor from `starts` to `ends` (exclusive) with `steps` along `axes`, as ONNX
defines it (negative values count from the end, then clamp to the dim; steps may be negative,
never 0).  Opset 1 takes starts, ends and axes as attributes; from 10 they are int64/int32
inputs (read from host memory) and steps joins them.

Its gradient is ONNX Runtime's: SliceGrad (com.microsoft; dY, the input's shape, starts, ends,
axes?, steps?) writes dY into zeros of the input's shape at the sliced positions.
"""
import numpy as np

from .gradients import gradient
from .schema import GRAPH_DATA_TYPES, MS_DOMAIN, INDEX_TYPES, REQUIRED, Attr, Input, schema

INDEX = tuple(INDEX_TYPES)


def slice_ranges(fail, shape, starts, ends, axes=None, steps=None):
    """One Python slice per dim of `shape` (dims not named in `axes` whole); `fail(message)`
    raises naming the op when the lists disagree in length, an axis is out of range or
    repeated, or a step is 0."""
    rank = len(shape)
    starts, ends = [int(v) for v in starts], [int(v) for v in ends]
    axes = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        fail(f"starts {tuple(starts)}, ends {tuple(ends)}, axes {tuple(axes)} and steps {tuple(steps)} "
             "must have the same length")
    bad = [a for a in axes if not -rank <= a < rank]
    if bad:
        fail(f"axes {tuple(axes)} hold {bad[0]}, out of range for an input of rank {rank}: "
             f"expected [{-rank}, {rank - 1}]")
    normal = [a + rank if a < 0 else a for a in axes]
    if len(set(normal)) != len(normal):
        fail(f"axes {tuple(axes)} name an axis twice")
    if 0 in steps:
        fail(f"steps {tuple(steps)} hold 0")
    ranges = [slice(None)] * rank
    for axis, start, end, step in zip(normal, starts, ends, steps):
        ranges[axis] = slice(start, end, step)
    return tuple(ranges)


def sliced_shape(shape, ranges):
    """The dims a slice keeps: Python's slice.indices clamps as ONNX does.  A symbolic dim stays
    when its axis is taken whole, else the shape is unknown (None)."""
    out = []
    for d, r in zip(shape, ranges):
        if r == slice(None):
            out.append(d)
        elif isinstance(d, int):
            out.append(len(range(*r.indices(d))))
        else:
            return None
    return tuple(out)


def _values(ctx, indices):
    """The constant values of the index inputs (None for an absent one; False when one is not
    known at build time)."""
    values = []
    for i in indices:
        t = ctx.input(i)
        if t is None:
            values.append(None)
            continue
        ctx.require_rank(i, 1)
        if t.value is None:
            return False
        values.append(t.value)
    return values


@schema("Slice", since=1, inputs=["data"], outputs=["output"], float_types=GRAPH_DATA_TYPES,
        attrs={"starts": Attr("ints", REQUIRED), "ends": Attr("ints", REQUIRED), "axes": Attr("ints")})
def infer_slice_attributes(ctx):
    shape = ctx.shape(0)
    if shape is None:
        return [ctx.out(None)]
    ranges = slice_ranges(ctx.fail, shape, ctx.attrs["starts"], ctx.attrs["ends"], ctx.attrs["axes"])
    return [ctx.out(sliced_shape(shape, ranges))]


def infer_slice(ctx):
    values = _values(ctx, (1, 2, 3, 4))
    shape = ctx.shape(0)
    if values is False or shape is None:
        return [ctx.out(None)]
    return [ctx.out(sliced_shape(shape, slice_ranges(ctx.fail, shape, *values)))]


SLICE_INPUTS = ["data", Input("starts", types=INDEX), Input("ends", types=INDEX),
                Input("axes", types=INDEX, optional=True), Input("steps", types=INDEX, optional=True)]
for _v in (10, 11, 13):
    schema("Slice", since=_v, inputs=SLICE_INPUTS, outputs=["output"], float_types=GRAPH_DATA_TYPES)(infer_slice)


@schema("SliceGrad", domain=MS_DOMAIN, inputs=["dY", Input("shape", types=(np.int64,))] + SLICE_INPUTS[1:],
        outputs=["dX"])
def infer_slice_grad(ctx):
    """dX has the forward input's shape (the `shape` input); dY the slice's."""
    ctx.require_rank(1, 1)
    shape = ctx.input(1).value
    values = _values(ctx, (2, 3, 4, 5))
    if shape is not None and values is not False:
        ctx.require_shape(0, sliced_shape(shape, slice_ranges(ctx.fail, shape, *values)),
                          f"the slice of an input of shape {tuple(shape)}")
    return [ctx.out(shape)]


@gradient("Slice", since=1, emits=("Shape", "SliceGrad"))
def slice_gradient(g):
    shape = g.node("Shape", [g.I(0)], [g.tmp("X_shape")])
    if g.opset < 10:
        index = [g.constant(np.array(g.attrs[k], dtype=np.int64), k) for k in ("starts", "ends")]
        if g.attrs.get("axes") is not None:
            index.append(g.constant(np.array(g.attrs["axes"], dtype=np.int64), "axes"))
    else:
        index = [g.I(i) for i in range(1, len(g.forward.inputs))]
    g.node("SliceGrad", [g.GO(0), shape] + index, [g.GI(0)], domain=MS_DOMAIN)
