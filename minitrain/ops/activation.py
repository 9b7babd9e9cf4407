"""Elementwise activations and their gradient ops (com.microsoft, version 1), ONNX Runtime's:

    Relu       -> ReluGrad(dY, X)          dX = dY where X > 0 else 0
    Sigmoid    -> SigmoidGrad(dY, Y)       dX = dY * Y * (1 - Y)
    Tanh       -> TanhGrad(dY, Y)          dX = dY * (1 - Y^2)
    LeakyRelu  -> LeakyReluGrad(dY, Y)     dX = dY where Y > 0 else alpha * dY
    QuickGelu  -> QuickGeluGrad(dY, X)     dX = dY * s * (1 + alpha X (1 - s)),  s = sigmoid(alpha X)

QuickGelu (com.microsoft, alpha 1.702) is x * sigmoid(alpha x).  LeakyRelu's gradient reads Y
as ONNX Runtime's does, which is only right for alpha > 0 (then Y > 0 exactly where X > 0); for
alpha <= 0 the builder hands LeakyReluGrad the input X instead, which the same kernel
differentiates correctly for any alpha.
"""
from .gradients import gradient
from .schema import MS_DOMAIN, Attr, onnx_float, schema
from .shape_utils import shapes_differ


def same_as_first_input(ctx):
    """Inference of an elementwise op: the output has the first input's shape."""
    return [ctx.out(ctx.shape(0))]


def same_as_inputs(ctx):
    """Inference of an elementwise gradient (dY, X_or_Y): both inputs share one shape."""
    a, b = ctx.shape(0), ctx.shape(1)
    if shapes_differ(a, b):
        ctx.fail(f"inputs {ctx.schema.inputs[0].name!r} {tuple(a)} and "
                 f"{ctx.schema.inputs[1].name!r} {tuple(b)} must have the same shape")
    return [ctx.out(a if a is not None else b)]


# the defaults, as the float32 values ONNX holds (gradient builders and fusions use them too)
LEAKY_RELU_ALPHA = onnx_float(0.01)
QUICK_GELU_ALPHA = onnx_float(1.702)
LEAKY_ALPHA = {"alpha": Attr("float", LEAKY_RELU_ALPHA)}
QUICKGELU_ALPHA = {"alpha": Attr("float", QUICK_GELU_ALPHA)}

# Forward ops; the versions listed are those where ONNX changed the schema (types only here).
for _v in (6, 14):
    schema("Relu", since=_v, inputs=["X"])(same_as_first_input)
for _v in (6, 13):
    schema("Sigmoid", since=_v, inputs=["X"])(same_as_first_input)
    schema("Tanh", since=_v, inputs=["input"], outputs=["output"])(same_as_first_input)
for _v in (6, 16):
    schema("LeakyRelu", since=_v, inputs=["X"], attrs=LEAKY_ALPHA)(same_as_first_input)
schema("QuickGelu", domain=MS_DOMAIN, inputs=["X"], attrs=QUICKGELU_ALPHA)(same_as_first_input)

# Gradient ops (com.microsoft, version 1).
schema("ReluGrad", domain=MS_DOMAIN, inputs=["dY", "X"], outputs=["dX"])(same_as_inputs)
schema("SigmoidGrad", domain=MS_DOMAIN, inputs=["dY", "Y"], outputs=["dX"])(same_as_inputs)
schema("TanhGrad", domain=MS_DOMAIN, inputs=["dY", "Y"], outputs=["dX"])(same_as_inputs)
schema("LeakyReluGrad", domain=MS_DOMAIN, inputs=["dY", "Y"], outputs=["dX"],
       attrs=LEAKY_ALPHA)(same_as_inputs)
schema("QuickGeluGrad", domain=MS_DOMAIN, inputs=["dY", "X"], outputs=["dX"],
       attrs=QUICKGELU_ALPHA)(same_as_inputs)


@gradient("Relu", since=6, emits=("ReluGrad",))
def relu_gradient(g):
    g.node("ReluGrad", [g.GO(0), g.I(0)], [g.GI(0)], domain=MS_DOMAIN)


@gradient("Sigmoid", since=6, emits=("SigmoidGrad",))
def sigmoid_gradient(g):
    g.node("SigmoidGrad", [g.GO(0), g.O(0)], [g.GI(0)], domain=MS_DOMAIN)


@gradient("Tanh", since=6, emits=("TanhGrad",))
def tanh_gradient(g):
    g.node("TanhGrad", [g.GO(0), g.O(0)], [g.GI(0)], domain=MS_DOMAIN)


@gradient("LeakyRelu", since=6, emits=("LeakyReluGrad",))
def leaky_relu_gradient(g):
    alpha = float(g.attrs.get("alpha", LEAKY_RELU_ALPHA))
    # Y > 0 marks X > 0 only when alpha > 0; otherwise test the input itself.
    marker = g.O(0) if alpha > 0 else g.I(0)
    g.node("LeakyReluGrad", [g.GO(0), marker], [g.GI(0)], {"alpha": alpha}, domain=MS_DOMAIN)


@gradient("QuickGelu", domain=MS_DOMAIN, since=1, emits=("QuickGeluGrad",))
def quick_gelu_gradient(g):
    g.node("QuickGeluGrad", [g.GO(0), g.I(0)], [g.GI(0)],
           {"alpha": float(g.attrs.get("alpha", QUICK_GELU_ALPHA))}, domain=MS_DOMAIN)
