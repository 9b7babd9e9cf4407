"""Ops that only move or reinterpret data: Identity, Flatten, Reshape, Shape, Transpose."""
import numpy as np

from .gradients import gradient
from .schema import GRAPH_DATA_TYPES, Attr, Input, schema
from .shape_utils import normalize_axis, product


def infer_identity(ctx):
    return [ctx.out(ctx.shape(0))]


for _v in (1, 13, 14, 16, 19):
    schema("Identity", since=_v, inputs=["input"], outputs=["output"], float_types=GRAPH_DATA_TYPES)(infer_identity)


@gradient("Identity", since=1, emits=("Identity",))
def identity_gradient(g):
    g.node("Identity", [g.GO(0)], [g.GI(0)])


def infer_flatten(ctx):
    """Y is 2-D: dims before `axis` multiply into rows, the rest into columns."""
    shape = ctx.shape(0)
    if shape is None:
        return [ctx.out(None)]
    axis = normalize_axis(ctx, ctx.attrs["axis"], len(shape), allow_end=True)
    return [ctx.out((product(shape[:axis]), product(shape[axis:])))]


for _v in (1, 9, 11, 13):
    schema("Flatten", since=_v, inputs=["input"], outputs=["output"], attrs={"axis": Attr("int", 1)},
           float_types=GRAPH_DATA_TYPES)(infer_flatten)


def reshape_back_gradient(g):
    """Gradient of a pure re-layout: reshape dY to the input's shape."""
    if not g.needs(0):
        return
    g.node("Reshape", [g.GO(0), g.shape_of(g.I(0))], [g.GI(0)])


gradient("Flatten", since=1, emits=("Reshape", "Shape"))(reshape_back_gradient)
gradient("Reshape", since=5, emits=("Reshape", "Shape"))(reshape_back_gradient)


def reshape_target(ctx, shape, target, allowzero):
    """ONNX's Reshape rules: 0 copies the input dim (unless allowzero), one -1 is inferred."""
    if list(target).count(-1) > 1:
        ctx.fail(f"input 'shape' {tuple(target)} has more than one -1")
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if shape is None or i >= len(shape):
                ctx.fail(f"input 'shape' {tuple(target)} copies dim {i} (0) that the input "
                         f"{None if shape is None else tuple(shape)} lacks")
            out.append(shape[i])
        elif d < -1:
            ctx.fail(f"input 'shape' {tuple(target)} has a negative dim {d}")
        else:
            out.append(int(d))
    if shape is None:
        return None if -1 in out else tuple(out)
    total = product(shape)
    if -1 in out:
        # a symbolic dim kept on both sides (the batch, copied by 0) cancels out of the -1
        given, kept = list(shape), [d for d in out if d != -1]
        for d in [d for d in kept if isinstance(d, str) and d in given]:
            given.remove(d)
            kept.remove(d)
        rest, known = product(given), product(kept)
        if not isinstance(rest, int) or not isinstance(known, int):
            return None
        if known == 0 or rest % known:
            ctx.fail(f"cannot reshape {tuple(shape)} ({total} elements) to {tuple(target)}")
        out[out.index(-1)] = rest // known
    elif isinstance(total, int) and all(isinstance(d, int) for d in out) and total != product(out):
        ctx.fail(f"cannot reshape {tuple(shape)} ({total} elements) to {tuple(target)}")
    return tuple(out)


def infer_reshape(ctx):
    ctx.require_rank(1, 1)
    target = ctx.input(1).value
    if target is None:
        return [ctx.out(None)]
    return [ctx.out(reshape_target(ctx, ctx.shape(0), target, ctx.attrs.get("allowzero", 0)))]


for _v in (5, 13):
    schema("Reshape", since=_v, inputs=["data", Input("shape", types=(np.int64,))],
           outputs=["reshaped"], float_types=GRAPH_DATA_TYPES)(infer_reshape)
for _v in (14, 19):
    schema("Reshape", since=_v, inputs=["data", Input("shape", types=(np.int64,))],
           outputs=["reshaped"], attrs={"allowzero": Attr("int", 0)}, float_types=GRAPH_DATA_TYPES)(infer_reshape)


def shape_slice(rank, start, end):
    """The dims [begin, stop) that Shape-15's `start` and `end` select from an input of
    `rank` dims: a negative value counts from the back, and both are clamped to [0, rank]
    (a start at or past the end selects nothing), as ONNX defines them."""
    def clamp(v):
        return min(max(v + rank if v < 0 else v, 0), rank)
    begin, stop = clamp(start), clamp(rank if end is None else end)
    return begin, max(begin, stop)


def infer_shape(ctx):
    """The input's shape (the dims from `start` to `end` from opset 15) as a 1-D int64
    tensor; its value is known when those dims are."""
    shape = ctx.shape(0)
    if shape is None:
        return [ctx.out(None, np.int64)]
    begin, stop = shape_slice(len(shape), ctx.attrs.get("start", 0), ctx.attrs.get("end"))
    dims = tuple(shape[begin:stop])
    value = dims if all(isinstance(d, int) for d in dims) else None
    return [ctx.out((len(dims),), np.int64, value)]


schema("Shape", since=1, inputs=["data"], outputs=["shape"], float_types=GRAPH_DATA_TYPES)(infer_shape)
schema("Shape", since=15, inputs=["data"], outputs=["shape"],
       attrs={"start": Attr("int", 0), "end": Attr("int")}, float_types=GRAPH_DATA_TYPES)(infer_shape)


def infer_transpose(ctx):
    shape = ctx.shape(0)
    if shape is None:
        return [ctx.out(None)]
    perm = ctx.attrs["perm"]
    if perm is None:
        perm = tuple(reversed(range(len(shape))))
    if sorted(perm) != list(range(len(shape))):
        ctx.attr_fail("perm", f"is not a permutation of the {len(shape)} axes of input {tuple(shape)}")
    return [ctx.out(tuple(shape[p] for p in perm))]


for _v in (1, 13):
    schema("Transpose", since=_v, inputs=["data"], outputs=["transposed"],
           attrs={"perm": Attr("ints")}, float_types=GRAPH_DATA_TYPES)(infer_transpose)


@gradient("Transpose", since=1, emits=("Transpose",))
def transpose_gradient(g):
    perm = g.attrs.get("perm")
    if perm is None:
        g.node("Transpose", [g.GO(0)], [g.GI(0)])
        return
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    g.node("Transpose", [g.GO(0)], [g.GI(0)], {"perm": inverse})
