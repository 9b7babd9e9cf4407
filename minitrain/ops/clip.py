"""Clip: the input limited to [min, max], the bounds attributes at opset 6 and optional scalar
inputs from 11; and its gradient as ONNX Runtime defines it: dY where min <= X <= max (the
bounds included, as PyTorch's clamp), else 0.  The bounds get no gradient."""
import numpy as np

from .activation import same_as_first_input
from .gradients import gradient
from .schema import Attr, Input, schema

FLOAT32_MAX = float(np.finfo(np.float32).max)


@schema("Clip", since=6, inputs=["input"], outputs=["output"],
        attrs={"min": Attr("float", -FLOAT32_MAX), "max": Attr("float", FLOAT32_MAX)})
def infer_clip_attributes(ctx):
    return same_as_first_input(ctx)


def infer_clip(ctx):
    """min and max, when given, hold one number each."""
    ctx.require_scalar(1, "one lower bound for every element")
    ctx.require_scalar(2, "one upper bound for every element")
    return same_as_first_input(ctx)


for _v in (11, 12, 13):
    schema("Clip", since=_v, inputs=["input", Input("min", optional=True), Input("max", optional=True)],
           outputs=["output"])(infer_clip)


@gradient("Clip", since=6, emits=("Less", "Greater", "Where", "Identity"))
def clip_gradient(g):
    """dY masked to 0 where X < min or X > max (Where on Less and Greater, which every opset
    from 9 has, rather than ONNX Runtime's GreaterOrEqual, from 12)."""
    x_type = g.type_of(g.I(0))
    dtype = np.dtype(x_type.dtype if x_type is not None else np.float32)
    if g.opset < 11:
        low = g.constant(np.array(g.attrs.get("min", -FLOAT32_MAX), dtype=dtype), "min")
        high = g.constant(np.array(g.attrs.get("max", FLOAT32_MAX), dtype=dtype), "max")
    else:
        low, high = g.I(1), g.I(2)
    if not (low or high):
        g.node("Identity", [g.GO(0)], [g.GI(0)])
        return
    zero = g.constant(np.zeros((), dtype=dtype), "zero")
    checks = [(bound, compare, base) for bound, compare, base in
              ((low, "Less", "below_min"), (high, "Greater", "above_max")) if bound]
    grad = g.GO(0)
    for k, (bound, compare, base) in enumerate(checks):
        outside = g.node(compare, [g.I(0), bound], [g.tmp(base)])
        grad = g.node("Where", [outside, zero, grad], [g.GI(0) if k == len(checks) - 1 else g.tmp("dX_in_min")])
