"""The pointwise activations of exported CNNs (HardSigmoid, HardSwish, Softplus, Elu, Selu,
Gelu) and ONNX Runtime's com.microsoft Gelu and FastGelu, each differentiated into one
com.microsoft gradient op that reads dY and the input X and carries the forward attributes:

    HardSigmoid -> HardSigmoidGrad   dX = alpha dY where 0 < alpha X + beta < 1, else 0
    HardSwish   -> HardSwishGrad     dX = 0 for X < -3, dY (X / 3 + 1/2) for X <= 3, dY above
    Softplus    -> SoftplusGrad      dX = dY sigmoid(X)
    Elu         -> EluGrad           dX = dY for X > 0, else dY alpha exp(X)
    Selu        -> SeluGrad          dX = gamma dY for X > 0, else dY gamma alpha exp(X)
    Gelu        -> GeluGrad          dX = dY (Phi(X) + X phi(X))            (approximate none)
                -> FastGeluGrad      the derivative of the tanh form          (approximate tanh)

Gelu (com.microsoft) and GeluGrad, FastGelu and FastGeluGrad are ONNX Runtime's own ops, built
as its gradient builders build them; ONNX Runtime builds no gradient for the others, and the
gradient ops named here follow its naming (dY, X -> dX) and PyTorch's backward formulas, the
kinks included (HardSwish's gradient at -3 is -dY/2 and at 3 is 3/2 dY, as PyTorch's).  FastGelu
with a bias differentiates as FastGelu(X + bias): FastGeluGrad at X + bias, summed over the
broadcast axes for the bias.
"""
from .activation import same_as_first_input, same_as_inputs
from .elementwise import reduce_to_input
from .gradients import gradient
from .schema import MS_DOMAIN, Attr, Input, schema
from .shape_utils import broadcast_shapes

HARD_SIGMOID_ATTRS = {"alpha": Attr("float", 0.2), "beta": Attr("float", 0.5)}
ELU_ATTRS = {"alpha": Attr("float", 1.0)}
SELU_ATTRS = {"alpha": Attr("float", 1.67326319217681884765625), "gamma": Attr("float", 1.05070102214813232421875)}
GELU_APPROXIMATIONS = ("none", "tanh")

# Forward ops; the versions listed are those where ONNX changed the schema (types only here).
for _v in (6, 22):
    schema("HardSigmoid", since=_v, inputs=["X"], attrs=HARD_SIGMOID_ATTRS)(same_as_first_input)
    schema("Elu", since=_v, inputs=["X"], attrs=ELU_ATTRS)(same_as_first_input)
    schema("Selu", since=_v, inputs=["X"], attrs=SELU_ATTRS)(same_as_first_input)
for _v in (14, 22):
    schema("HardSwish", since=_v, inputs=["X"])(same_as_first_input)
for _v in (1, 22):
    schema("Softplus", since=_v, inputs=["X"])(same_as_first_input)


@schema("Gelu", since=20, inputs=["X"], attrs={"approximate": Attr("string", "none")})
def infer_gelu(ctx):
    """approximate is none (the erf form) or tanh."""
    if ctx.attrs["approximate"] not in GELU_APPROXIMATIONS:
        ctx.attr_fail("approximate", f"is not one of {list(GELU_APPROXIMATIONS)}")
    return same_as_first_input(ctx)


schema("Gelu", domain=MS_DOMAIN, inputs=["X"])(same_as_first_input)


@schema("FastGelu", domain=MS_DOMAIN, inputs=["X", Input("bias", optional=True)])
def infer_fast_gelu(ctx):
    """The optional bias is added to X first; it broadcasts to X's shape."""
    if ctx.input(1) is not None:
        shape = broadcast_shapes(ctx, [ctx.shape(0), ctx.shape(1)])
        if shape is not None and ctx.shape(0) is not None and tuple(shape) != tuple(ctx.shape(0)):
            ctx.fail(f"input 'bias' {tuple(ctx.shape(1))} does not broadcast to input 'X' {tuple(ctx.shape(0))}")
    return same_as_first_input(ctx)


# Gradient ops (com.microsoft, version 1): dY and the forward input X, the forward attributes.
for _op, _attrs in (("HardSigmoidGrad", HARD_SIGMOID_ATTRS), ("HardSwishGrad", {}), ("SoftplusGrad", {}),
                    ("EluGrad", ELU_ATTRS), ("SeluGrad", SELU_ATTRS), ("GeluGrad", {}), ("FastGeluGrad", {})):
    schema(_op, domain=MS_DOMAIN, inputs=["dY", "X"], outputs=["dX"], attrs=_attrs)(same_as_inputs)


def _builder(op_type, grad_op, attrs):
    """The builder of `op_type`: one `grad_op`(dY, X) node with the forward attributes."""
    def build(g):
        values = {name: float(g.attrs.get(name, spec.default)) for name, spec in attrs.items()}
        g.node(grad_op, [g.GO(0), g.I(0)], [g.GI(0)], values, domain=MS_DOMAIN)
    build.__name__ = f"{op_type.lower()}_gradient"
    return build


for _op, _since, _grad, _attrs in (("HardSigmoid", 6, "HardSigmoidGrad", HARD_SIGMOID_ATTRS),
                                   ("HardSwish", 14, "HardSwishGrad", {}), ("Softplus", 1, "SoftplusGrad", {}),
                                   ("Elu", 6, "EluGrad", ELU_ATTRS), ("Selu", 6, "SeluGrad", SELU_ATTRS)):
    gradient(_op, since=_since, emits=(_grad,))(_builder(_op, _grad, _attrs))


@gradient("Gelu", since=20, emits=("GeluGrad", "FastGeluGrad"))
def gelu_gradient(g):
    """GeluGrad for the erf form, FastGeluGrad (ONNX Runtime's tanh form) for approximate=tanh."""
    grad_op = "FastGeluGrad" if g.attrs.get("approximate", "none") == "tanh" else "GeluGrad"
    g.node(grad_op, [g.GO(0), g.I(0)], [g.GI(0)], domain=MS_DOMAIN)


@gradient("Gelu", domain=MS_DOMAIN, since=1, emits=("GeluGrad",))
def ms_gelu_gradient(g):
    g.node("GeluGrad", [g.GO(0), g.I(0)], [g.GI(0)], domain=MS_DOMAIN)


@gradient("FastGelu", domain=MS_DOMAIN, since=1, differentiable=(0, 1),
          emits=("FastGeluGrad", "Add", "Identity", "Shape", "SumToShape"))
def fast_gelu_gradient(g):
    if not g.I(1):
        g.node("FastGeluGrad", [g.GO(0), g.I(0)], [g.GI(0)], domain=MS_DOMAIN)
        return
    shifted = g.node("Add", [g.I(0), g.I(1)], [g.tmp("X_plus_bias")])
    dx = g.GI(0) or g.tmp("dX")
    g.node("FastGeluGrad", [g.GO(0), shifted], [dx], domain=MS_DOMAIN)
    reduce_to_input(g, dx, 1)
