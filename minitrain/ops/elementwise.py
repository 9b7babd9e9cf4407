"""Broadcasting arithmetic (Add, Sub, Mul, Div, Neg, Sum) and SumToShape, the reduction over
broadcast axes that their gradients need."""
import numpy as np

from ..errors import ShapeError
from .gradients import gradient
from .schema import GRAPH_FLOAT_TYPES, MS_DOMAIN, Input, schema
from .shape_utils import broadcast_shapes


def broadcast_inference(ctx):
    return [ctx.out(broadcast_shapes(ctx, [t.shape for t in ctx.input_types]))]


# Div also takes integers: ONNX Runtime's gradient of ReduceMean divides element counts.
INTEGER_DIV_TYPES = (np.dtype(np.int32), np.dtype(np.int64))
for _op, _versions in (("Add", (7, 13, 14)), ("Sub", (7, 13, 14)), ("Mul", (7, 13, 14)), ("Div", (7, 13, 14))):
    _types = GRAPH_FLOAT_TYPES + INTEGER_DIV_TYPES if _op == "Div" else GRAPH_FLOAT_TYPES
    for _v in _versions:
        schema(_op, since=_v, inputs=["A", "B"], outputs=["C"], float_types=_types)(broadcast_inference)
for _v in (8, 13):
    schema("Sum", since=_v, inputs=[Input("data_0", variadic=True)], outputs=["sum"])(broadcast_inference)
for _v in (6, 13):
    schema("Neg", since=_v, inputs=["X"])(lambda ctx: [ctx.out(ctx.shape(0))])


@schema("SumToShape", domain=MS_DOMAIN, inputs=["X", Input("shape", types=(np.int64,))])
def infer_sum_to_shape(ctx):
    """Sum X over the axes along which `shape` was broadcast to X's shape."""
    value = ctx.input(1).value
    ctx.require_rank(1, 1)
    return [ctx.out(value)]


def broadcast_axes(x_shape, shape):
    """The axes of x_shape that SumToShape sums to reach `shape` (the leading ones, and those
    where shape has 1 and x does not); ShapeError when shape does not broadcast to x_shape."""
    shape = tuple(int(d) for d in shape)
    lead = len(x_shape) - len(shape)
    if lead < 0 or any(s not in (1, d) for s, d in zip(shape, x_shape[lead:])):
        raise ShapeError(f"SumToShape: input 'shape' {shape} does not broadcast to input 'X' {tuple(x_shape)}")
    return tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and x_shape[lead + i] != 1)


def reduce_to_input(g, grad, i):
    """Write `grad` (shaped like the output) as the gradient of input i, summing over the
    axes along which input i was broadcast."""
    if not g.needs(i):
        return
    x_type, y_type = g.type_of(g.I(i)), g.type_of(g.forward.outputs[0])
    if x_type is not None and y_type is not None and x_type.shape is not None and x_type.shape == y_type.shape:
        g.node("Identity", [grad], [g.GI(i)])
        return
    g.node("SumToShape", [grad, g.shape_of(g.I(i))], [g.GI(i)], domain=MS_DOMAIN)


@gradient("Add", since=7, differentiable=(0, 1), emits=("Identity", "Shape", "SumToShape"))
def add_gradient(g):
    reduce_to_input(g, g.GO(0), 0)
    reduce_to_input(g, g.GO(0), 1)


@gradient("Sum", since=8, differentiable=None, emits=("Identity", "Shape", "SumToShape"))
def sum_gradient(g):
    for i in range(len(g.forward.inputs)):
        reduce_to_input(g, g.GO(0), i)


@gradient("Sub", since=7, differentiable=(0, 1), emits=("Identity", "Shape", "SumToShape", "Neg"))
def sub_gradient(g):
    reduce_to_input(g, g.GO(0), 0)
    if g.needs(1):
        reduce_to_input(g, g.node("Neg", [g.GO(0)], [g.tmp("neg")]), 1)


@gradient("Neg", since=6, emits=("Neg",))
def neg_gradient(g):
    g.node("Neg", [g.GO(0)], [g.GI(0)])


@gradient("Mul", since=7, differentiable=(0, 1), emits=("Identity", "Shape", "SumToShape", "Mul"))
def mul_gradient(g):
    if g.needs(0):
        reduce_to_input(g, g.node("Mul", [g.GO(0), g.I(1)], [g.tmp("dA")]), 0)
    if g.needs(1):
        reduce_to_input(g, g.node("Mul", [g.GO(0), g.I(0)], [g.tmp("dB")]), 1)


@gradient("Div", since=7, differentiable=(0, 1), emits=("Identity", "Shape", "SumToShape", "Div", "Mul", "Neg"))
def div_gradient(g):
    """dA = dC / B; dB = -dC * A / B^2, taken as -(dC / B) * C from the forward output C."""
    if not (g.needs(0) or g.needs(1)):
        return
    quotient = g.node("Div", [g.GO(0), g.I(1)], [g.tmp("dA")])
    reduce_to_input(g, quotient, 0)
    if g.needs(1):
        scaled = g.node("Mul", [quotient, g.O(0)], [g.tmp("dC_A_BB")])
        reduce_to_input(g, g.node("Neg", [scaled], [g.tmp("dB")]), 1)
