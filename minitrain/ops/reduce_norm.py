"""ReduceSumSquare and ReduceL2: the sum of squares, and its square root, over `axes` (the
attribute up to opset 13, the optional int64 input from 18, as reduce.py's reductions take
them).  With noop_with_empty_axes=1 and no axes nothing is reduced, and the elementwise part
still applies (X * X, |X|), as ONNX's reference computes it.

Gradients (dY and Y first unsqueezed back to the kept dims when keepdims=0):
    ReduceSumSquare -> dX = X * dY * 2
    ReduceL2        -> dX = X * Where(Y == 0, 0, dY / Y)     (ONNX Runtime's: 0 where Y is 0)
"""
import numpy as np

from .gradients import gradient
from .reduce import axes_operand, kept_dims, reduces_nothing, register_reduce

register_reduce("ReduceSumSquare", (1, 11, 13), (18,))
register_reduce("ReduceL2", (1, 11, 13), (18,))


def _kept(g, value, base):
    """`value` (shaped like the output) with the reduced dims restored."""
    return value if reduces_nothing(g) else kept_dims(g, value, axes_operand(g), base)


def _zero(g):
    x_type = g.type_of(g.I(0))
    return np.zeros((), dtype=x_type.dtype if x_type is not None else np.float32)


@gradient("ReduceSumSquare", since=1, emits=("Unsqueeze", "Mul"))
def reduce_sum_square_gradient(g):
    scaled = g.node("Mul", [g.I(0), _kept(g, g.GO(0), "dY_kept")], [g.tmp("X_dY")])
    g.node("Mul", [scaled, g.constant(_zero(g) + 2, "two")], [g.GI(0)])


@gradient("ReduceL2", since=1, emits=("Div", "Equal", "Where", "Unsqueeze", "Mul"))
def reduce_l2_gradient(g):
    zero = g.constant(_zero(g), "zero")
    ratio = g.node("Div", [g.GO(0), g.O(0)], [g.tmp("dY_over_Y")])
    vanishes = g.node("Equal", [g.O(0), zero], [g.tmp("Y_is_zero")])
    masked = g.node("Where", [vanishes, zero, ratio], [g.tmp("dY_over_Y_masked")])
    g.node("Mul", [g.I(0), _kept(g, masked, "dY_over_Y_kept")], [g.GI(0)])
