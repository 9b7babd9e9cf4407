"""Max and Min: the elementwise largest or smallest of one or more inputs, broadcast together;
and their gradient, as ONNX Runtime builds it: each input gets dY where it equals the output,
shared evenly among the inputs that tie there (PyTorch's maximum and minimum share a tie the
same way), summed over the axes along which the input was broadcast:

    M_i = Cast(Equal(X_i, Y)),  dX_i = SumToShape(dY / Sum(M_0, ..., M_n) * M_i, Shape(X_i))

A single input is the identity.
"""
import numpy as np

from .compare import ONNX_CODE
from .elementwise import broadcast_inference, reduce_to_input
from .gradients import gradient
from .schema import Input, schema

for _op in ("Max", "Min"):
    for _v in (8, 12, 13):
        schema(_op, since=_v, inputs=[Input("data_0", variadic=True)], outputs=[_op.lower()])(broadcast_inference)


def min_max_gradient(g):
    inputs = range(len(g.forward.inputs))
    if not any(g.needs(i) for i in inputs):
        return
    if len(g.forward.inputs) == 1:
        g.node("Identity", [g.GO(0)], [g.GI(0)])
        return
    y_type = g.type_of(g.forward.outputs[0])
    to = {"to": ONNX_CODE[y_type.dtype if y_type is not None else np.dtype(np.float32)]}
    masks = [g.node("Cast", [g.node("Equal", [g.I(i), g.O(0)], [g.tmp(f"hit_{i}")])], [g.tmp(f"mask_{i}")], to)
             for i in inputs]
    ties = g.node("Sum", masks, [g.tmp("ties")])
    share = g.node("Div", [g.GO(0), ties], [g.tmp("dY_share")])
    for i in inputs:
        if g.needs(i):
            reduce_to_input(g, g.node("Mul", [share, masks[i]], [g.tmp(f"dX_{i}")]), i)


for _op in ("Max", "Min"):
    gradient(_op, since=8, differentiable=None,
             emits=("Identity", "Equal", "Cast", "Sum", "Div", "Mul", "Shape", "SumToShape"))(min_max_gradient)
