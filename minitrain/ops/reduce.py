"""ReduceSum, ReduceMean and ReduceMax: the sum, mean or largest value over `axes`, each kept
as a dim of 1 with keepdims; and their gradients, as ONNX Runtime builds them.

Up to opset 12 (ReduceSum) or 17 (ReduceMean, ReduceMax) the axes are an attribute; after that
an optional int64 input (read from host memory), and noop_with_empty_axes=1 makes absent or
empty axes the identity instead of a reduction over every axis.

Gradients (dY first unsqueezed back to the kept dims when keepdims=0):
    ReduceSum  -> Expand(dY, Shape(X))
    ReduceMean -> Expand(dY * Size(Y) / Size(X), Shape(X))     (Scale nodes, exact for any batch)
    ReduceMax  -> dY * M / ReduceSum(M),  M = Cast(Equal(X, Y)) (ties share dY evenly, as ONNX
                  Runtime's Max and PyTorch's amax share it)
"""
import numpy as np

from ..errors import GraphError
from .compare import ONNX_CODE
from .gradients import gradient
from .schema import MS_DOMAIN, Attr, Input, schema

REDUCE_ATTRS = {"keepdims": Attr("int", 1)}


def reduced_axes(fail, rank, axes, noop_with_empty_axes=0):
    """The sorted, non-negative axes to reduce (None: none, the identity); `fail(message)`
    raises naming the op when an axis is out of [-rank, rank) or repeated."""
    if axes is None or len(axes) == 0:
        return None if noop_with_empty_axes else tuple(range(rank))
    bad = [a for a in axes if not -rank <= a < rank]
    if bad:
        fail(f"axes {tuple(axes)} hold {bad[0]}, out of range for an input of rank {rank}: expected "
             f"[{-rank}, {rank - 1}]")
    normal = sorted(a + rank if a < 0 else a for a in axes)
    if len(set(normal)) != len(normal):
        fail(f"axes {tuple(axes)} name an axis twice")
    return tuple(normal)


def reduced_shape(shape, axes, keepdims):
    if axes is None:
        return tuple(shape)
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def infer_reduce(ctx):
    """Y: X's shape with the reduced axes made 1 (keepdims) or dropped.  In the input form the
    shape is known when the axes input is absent or a constant; a reduction of every axis
    without keepdims is a scalar whatever X's rank."""
    shape = ctx.shape(0)
    if "axes" in ctx.schema.attrs:
        axes, noop = ctx.attrs["axes"], 0
    else:
        ctx.require_rank(1, 1)
        axes_type, noop = ctx.input(1), ctx.attrs["noop_with_empty_axes"]
        if axes_type is not None and axes_type.value is None:
            return [ctx.out(None)]
        axes = None if axes_type is None else axes_type.value
    if shape is None:
        every_axis = not axes and not noop and not ctx.attrs["keepdims"]
        return [ctx.out(() if every_axis else None)]
    return [ctx.out(reduced_shape(shape, reduced_axes(ctx.fail, len(shape), axes, noop), ctx.attrs["keepdims"]))]


def register_reduce(op_type, attribute_versions, input_versions):
    """The schemas of a reduction: axes an attribute at `attribute_versions`, an input after."""
    for v in attribute_versions:
        schema(op_type, since=v, inputs=["data"], outputs=["reduced"],
               attrs={**REDUCE_ATTRS, "axes": Attr("ints")})(infer_reduce)
    for v in input_versions:
        schema(op_type, since=v, inputs=["data", Input("axes", types=(np.int64,), optional=True)],
               outputs=["reduced"], attrs={**REDUCE_ATTRS, "noop_with_empty_axes": Attr("int", 0)})(infer_reduce)


register_reduce("ReduceSum", (1, 11), (13,))
register_reduce("ReduceMean", (1, 11, 13), (18,))
register_reduce("ReduceMax", (1, 11, 12, 13), (18, 20))


# --------------------------------------------------------------------------- gradients
def reduces_nothing(g):
    """Whether noop_with_empty_axes makes the forward node the identity: its axes input is
    absent or empty (the emptiness read from the input's static shape)."""
    if not g.attrs.get("noop_with_empty_axes", 0):
        return False
    if not g.I(1):
        return True
    t = g.type_of(g.I(1))
    if t is None or t.shape is None or not isinstance(t.shape[0], int):
        raise GraphError(f"gradient of {g.forward.op_type} (node {g.forward.name!r}): with noop_with_empty_axes=1 "
                         f"the length of input 'axes' {g.I(1)!r} must be known")
    return t.shape[0] == 0


def axes_operand(g):
    """The forward reduction's axes in the form Unsqueeze and ReduceSum take them at the graph's
    opset: (extra inputs, attributes), an attribute before opset 13 and an int64 input from 13;
    None when the forward node reduces every axis."""
    if g.I(1):
        return [g.I(1)], {}
    axes = g.attrs.get("axes")
    if not axes:
        return None
    if g.opset < 13:
        return [], {"axes": list(axes)}
    return [g.constant(np.array(axes, dtype=np.int64), "axes")], {}


def kept_dims(g, value, axes, base):
    """`value` (shaped like the reduction's output) with the reduced dims restored as 1s;
    `axes` is axes_operand's answer."""
    if g.attrs.get("keepdims", 1) or axes is None:
        return value
    extra, attrs = axes
    return g.node("Unsqueeze", [value] + extra, [g.tmp(base)], attrs)


def _expanded_to_input(g, value):
    shape = g.node("Shape", [g.I(0)], [g.tmp("X_shape")])
    g.node("Expand", [value, shape], [g.GI(0)])


@gradient("ReduceSum", since=1, emits=("Identity", "Unsqueeze", "Shape", "Expand"))
def reduce_sum_gradient(g):
    if reduces_nothing(g):
        g.node("Identity", [g.GO(0)], [g.GI(0)])
        return
    axes = axes_operand(g)
    _expanded_to_input(g, kept_dims(g, g.GO(0), axes, "dY_kept"))


@gradient("ReduceMean", since=1, emits=("Identity", "Unsqueeze", "Size", "Scale", "Shape", "Expand"))
def reduce_mean_gradient(g):
    if reduces_nothing(g):
        g.node("Identity", [g.GO(0)], [g.GI(0)])
        return
    axes = axes_operand(g)
    dy = kept_dims(g, g.GO(0), axes, "dY_kept")
    size_x = g.node("Size", [g.I(0)], [g.tmp("X_size")])
    size_y = g.node("Size", [g.GO(0)], [g.tmp("Y_size")])
    times_y = g.node("Scale", [dy, size_y], [g.tmp("dY_times_Y_size")], domain=MS_DOMAIN)
    per_element = g.node("Scale", [times_y, size_x], [g.tmp("dY_per_element")], {"scale_down": 1},
                         domain=MS_DOMAIN)
    _expanded_to_input(g, per_element)


@gradient("ReduceMax", since=1, emits=("Identity", "Unsqueeze", "Equal", "Cast", "ReduceSum", "Div", "Mul"))
def reduce_max_gradient(g):
    if reduces_nothing(g):
        g.node("Identity", [g.GO(0)], [g.GI(0)])
        return
    axes = axes_operand(g)
    x_type = g.type_of(g.I(0))
    dtype = x_type.dtype if x_type is not None else np.dtype(np.float32)
    y = kept_dims(g, g.O(0), axes, "Y_kept")
    dy = kept_dims(g, g.GO(0), axes, "dY_kept")
    hits = g.node("Equal", [g.I(0), y], [g.tmp("is_max")])
    mask = g.node("Cast", [hits], [g.tmp("max_mask")], {"to": ONNX_CODE[np.dtype(dtype)]})
    extra, attrs = ([], {}) if axes is None else axes
    ties = g.node("ReduceSum", [mask] + extra, [g.tmp("max_count")], {**attrs, "keepdims": 1})
    share = g.node("Div", [dy, ties], [g.tmp("dY_share")])
    g.node("Mul", [mask, share], [g.GI(0)])
