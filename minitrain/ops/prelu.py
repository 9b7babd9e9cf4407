"""PRelu: X where X > 0, else slope * X, with the slope broadcast to X (unidirectionally: a
per-channel slope of shape (C, 1, 1), as torch exports nn.PReLU, or one shared value); and its
gradient to both inputs, as PyTorch's prelu backward defines it:

    dX     = Where(X > 0, dY, dY * slope)
    dslope = SumToShape(Where(X > 0, 0, dY * X), Shape(slope))

ONNX Runtime builds no gradient for PRelu; this one is written with standard ops.
"""
import numpy as np

from .elementwise import reduce_to_input
from .gradients import gradient
from .schema import schema
from .shape_utils import broadcast_shapes, shapes_differ


def infer_prelu(ctx):
    """Y has X's shape: the slope must broadcast to it without growing it."""
    x, slope = ctx.shape(0), ctx.shape(1)
    joint = broadcast_shapes(ctx, [x, slope])
    if joint is not None and shapes_differ(joint, x):
        ctx.fail(f"input 'slope' {tuple(slope)} does not broadcast to input 'X' {tuple(x)} without growing it")
    return [ctx.out(x)]


for _v in (7, 9, 16):
    schema("PRelu", since=_v, inputs=["X", "slope"])(infer_prelu)


@gradient("PRelu", since=9, differentiable=(0, 1), emits=("Greater", "Where", "Mul", "Identity", "Shape", "SumToShape"))
def prelu_gradient(g):
    if not (g.needs(0) or g.needs(1)):
        return
    x_type = g.type_of(g.I(0))
    zero = g.constant(np.zeros((), dtype=x_type.dtype if x_type is not None else np.float32), "zero")
    positive = g.node("Greater", [g.I(0), zero], [g.tmp("X_positive")])
    if g.needs(0):
        scaled = g.node("Mul", [g.GO(0), g.I(1)], [g.tmp("dY_slope")])
        g.node("Where", [positive, g.GO(0), scaled], [g.GI(0)])
    if g.needs(1):
        product = g.node("Mul", [g.GO(0), g.I(0)], [g.tmp("dY_X")])
        reduce_to_input(g, g.node("Where", [positive, zero, product], [g.tmp("dslope_full")]), 1)
