"""Elementwise math a loss or an exported model is written with: Log, Exp, Sqrt, Abs, Sign,
Pow, Erf and Reciprocal, with their gradients as ONNX Runtime's builders emit them (standard
ops only):

    Log        -> dX = dY / X
    Exp        -> dX = dY * Y
    Sqrt       -> dX = dY * (0.5 / Y)
    Abs        -> dX = dY * Sign(X)
    Pow        -> dA = dY * B * A^(B - 1);  dB = dY * Y * Log(A)
    Erf        -> dX = dY * (2 / sqrt(pi)) * Exp(-(X * X))
    Reciprocal -> dX = dY * -(Y * Y)

Sign has no gradient (it is flat almost everywhere), as in ONNX Runtime.  Pow's exponent
gradient, which ONNX Runtime does not build, is NaN where the base is negative, as the maths
says; a constant exponent (x ** 2) never asks for it.
"""
import numpy as np

from .activation import same_as_first_input
from .elementwise import broadcast_inference, reduce_to_input
from .gradients import gradient
from .schema import schema

# The versions listed are those where ONNX changed the schema (types only here).
for _op, _versions in (("Log", (6, 13)), ("Exp", (6, 13)), ("Sqrt", (6, 13)), ("Abs", (6, 13)),
                       ("Sign", (9, 13)), ("Erf", (9, 13)), ("Reciprocal", (6, 13))):
    for _v in _versions:
        schema(_op, since=_v, inputs=["input"], outputs=["output"])(same_as_first_input)
for _v in (7, 12, 13, 15):
    schema("Pow", since=_v, inputs=["X", "Y"], outputs=["Z"])(broadcast_inference)


def scalar_constant(g, value, like, base):
    """A 0-d constant of `value` in the dtype of forward value `like`."""
    t = g.type_of(like)
    return g.constant(np.array(value, dtype=t.dtype if t is not None else np.float32), base)


@gradient("Log", since=6, emits=("Div",))
def log_gradient(g):
    g.node("Div", [g.GO(0), g.I(0)], [g.GI(0)])


@gradient("Exp", since=6, emits=("Mul",))
def exp_gradient(g):
    g.node("Mul", [g.GO(0), g.O(0)], [g.GI(0)])


@gradient("Sqrt", since=6, emits=("Div", "Mul"))
def sqrt_gradient(g):
    half_over_y = g.node("Div", [scalar_constant(g, 0.5, g.I(0), "half"), g.O(0)], [g.tmp("half_over_Y")])
    g.node("Mul", [g.GO(0), half_over_y], [g.GI(0)])


@gradient("Abs", since=6, emits=("Sign", "Mul"))
def abs_gradient(g):
    sign = g.node("Sign", [g.I(0)], [g.tmp("sign")])
    g.node("Mul", [g.GO(0), sign], [g.GI(0)])


@gradient("Pow", since=7, differentiable=(0, 1),
          emits=("Sub", "Pow", "Mul", "Log", "Identity", "Shape", "SumToShape"))
def pow_gradient(g):
    a, b = g.I(0), g.I(1)
    if g.needs(0):
        b_minus_1 = g.node("Sub", [b, scalar_constant(g, 1.0, a, "one")], [g.tmp("B_minus_1")])
        power = g.node("Pow", [a, b_minus_1], [g.tmp("A_pow_B_minus_1")])
        scaled = g.node("Mul", [power, b], [g.tmp("B_A_pow_B_minus_1")])
        reduce_to_input(g, g.node("Mul", [g.GO(0), scaled], [g.tmp("dA")]), 0)
    if g.needs(1):
        log_a = g.node("Log", [a], [g.tmp("log_A")])
        y_log_a = g.node("Mul", [g.O(0), log_a], [g.tmp("Y_log_A")])
        reduce_to_input(g, g.node("Mul", [g.GO(0), y_log_a], [g.tmp("dB")]), 1)


@gradient("Erf", since=9, emits=("Mul", "Neg", "Exp"))
def erf_gradient(g):
    squared = g.node("Mul", [g.I(0), g.I(0)], [g.tmp("X_squared")])
    gauss = g.node("Exp", [g.node("Neg", [squared], [g.tmp("minus_X_squared")])], [g.tmp("exp_minus_X_squared")])
    slope = g.node("Mul", [scalar_constant(g, 2.0 / np.sqrt(np.pi), g.I(0), "two_over_sqrt_pi"), gauss],
                   [g.tmp("erf_slope")])
    g.node("Mul", [g.GO(0), slope], [g.GI(0)])


@gradient("Reciprocal", since=6, emits=("Mul", "Neg"))
def reciprocal_gradient(g):
    squared = g.node("Mul", [g.O(0), g.O(0)], [g.tmp("Y_squared")])
    g.node("Mul", [g.GO(0), g.node("Neg", [squared], [g.tmp("minus_Y_squared")])], [g.GI(0)])
