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
    BiasGelu    -> BiasGeluGrad_dX   GeluGrad at A + B, summed over A's leading axes for B

Gelu (com.microsoft) and GeluGrad, FastGelu and FastGeluGrad are ONNX Runtime's own ops, built
as its gradient builders build them; ONNX Runtime builds no gradient for the others, and the
gradient ops named here follow its naming (dY, X -> dX) and PyTorch's backward formulas, the
kinks included (HardSwish's gradient at -3 is -dY/2 and at 3 is 3/2 dY, as PyTorch's).  FastGelu
with a bias differentiates as FastGelu(X + bias): FastGeluGrad at X + bias, summed over the
broadcast axes for the bias.  BiasGelu(A, B) is ONNX Runtime's Gelu(A + B) for a bias B of
A's last dim (fusion/bias_gelu.py writes it for an Add feeding a Gelu); its gradient is its own
BiasGeluGrad_dX(dY, A, B), the gradient of A + B, which is B's summed over the leading axes.
"""
from .activation import same_as_first_input, same_as_inputs
from .elementwise import reduce_to_input
from .gradients import gradient
from .schema import MS_DOMAIN, Attr, Input, schema
from .shape_utils import broadcast_shapes, dims_differ, shapes_differ

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


def check_last_dim_bias(ctx, x, bias):
    """Input `bias` is one-dimensional, of the size of input `x`'s last dim."""
    x_shape, b_shape = ctx.shape(x), ctx.shape(bias)
    names = [f.name for f in ctx.schema.inputs]
    if x_shape is not None and len(x_shape) == 0:
        ctx.fail(f"input {names[x]!r} is a scalar; it needs a last dim for the bias")
    if b_shape is not None and (len(b_shape) != 1 or (x_shape is not None and dims_differ(b_shape[0], x_shape[-1]))):
        ctx.fail(f"input {names[bias]!r} {tuple(b_shape)} is not one-dimensional of the size of the last dim "
                 f"of input {names[x]!r} {tuple(x_shape) if x_shape is not None else None}")


@schema("BiasGelu", domain=MS_DOMAIN, inputs=["A", "B"], outputs=["C"])
def infer_bias_gelu(ctx):
    """B is one-dimensional, of A's last dim."""
    check_last_dim_bias(ctx, 0, 1)
    return same_as_first_input(ctx)


@schema("BiasGeluGrad_dX", domain=MS_DOMAIN, inputs=["dY", "X", "B"], outputs=["dX"])
def infer_bias_gelu_grad(ctx):
    """dY and X share one shape; B is one-dimensional, of X's last dim."""
    if shapes_differ(ctx.shape(0), ctx.shape(1)):
        ctx.fail(f"inputs 'dY' {tuple(ctx.shape(0))} and 'X' {tuple(ctx.shape(1))} must have the same shape")
    check_last_dim_bias(ctx, 1, 2)
    return [ctx.out(ctx.shape(0) if ctx.shape(0) is not None else ctx.shape(1))]


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


@gradient("BiasGelu", domain=MS_DOMAIN, since=1, differentiable=(0, 1),
          emits=("BiasGeluGrad_dX", "Identity", "Shape", "SumToShape"))
def bias_gelu_gradient(g):
    """dA = BiasGeluGrad_dX(dY, A, B); dB sums it over A's leading axes."""
    da = g.GI(0) if g.needs(0) else g.tmp("dA")
    g.node("BiasGeluGrad_dX", [g.GO(0), g.I(0), g.I(1)], [da], domain=MS_DOMAIN)
    reduce_to_input(g, da, 1)
