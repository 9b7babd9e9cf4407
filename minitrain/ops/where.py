"""Where: X where the bool condition holds, else Y, all three broadcast together; and its
gradient, as ONNX Runtime builds it: dX = Where(condition, dY, 0), dY_in = Where(condition,
0, dY), each summed over the axes along which its input was broadcast."""
import numpy as np

from .elementwise import reduce_to_input
from .gradients import gradient
from .schema import Input, schema
from .shape_utils import broadcast_shapes


def infer_where(ctx):
    return [ctx.out(broadcast_shapes(ctx, [t.shape for t in ctx.input_types]))]


for _v in (9, 16):
    schema("Where", since=_v, inputs=[Input("condition", types=(np.bool_,)), "X", "Y"])(infer_where)


@gradient("Where", since=9, differentiable=(1, 2), emits=("Where", "Identity", "Shape", "SumToShape"))
def where_gradient(g):
    y_type = g.type_of(g.forward.outputs[0])
    zero = g.constant(np.zeros((), dtype=y_type.dtype if y_type is not None else np.float32), "zero")
    if g.needs(1):
        reduce_to_input(g, g.node("Where", [g.I(0), g.GO(0), zero], [g.tmp("dX")]), 1)
    if g.needs(2):
        reduce_to_input(g, g.node("Where", [g.I(0), zero, g.GO(0)], [g.tmp("dY")]), 2)
