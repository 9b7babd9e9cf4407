"""Elementwise activations (Relu, ...) and their gradient ops in com.microsoft."""
from .gradients import gradient
from .schema import MS_DOMAIN, schema


def same_as_first_input(ctx):
    """Inference of an elementwise op: the output has the first input's shape."""
    return [ctx.out(ctx.shape(0))]


def same_as_inputs(ctx):
    """Inference of an elementwise gradient (dY, X_or_Y): both inputs share one shape."""
    a, b = ctx.shape(0), ctx.shape(1)
    if a is not None and b is not None and len(a) == len(b):
        for x, y in zip(a, b):
            if isinstance(x, int) and isinstance(y, int) and x != y:
                ctx.fail(f"inputs {ctx.schema.inputs[0].name!r} {tuple(a)} and "
                         f"{ctx.schema.inputs[1].name!r} {tuple(b)} must have the same shape")
    elif a is not None and b is not None:
        ctx.fail(f"inputs {ctx.schema.inputs[0].name!r} {tuple(a)} and "
                 f"{ctx.schema.inputs[1].name!r} {tuple(b)} must have the same shape")
    return [ctx.out(a if a is not None else b)]


schema("Relu", since=6, inputs=["X"])(same_as_first_input)
schema("Relu", since=14, inputs=["X"])(same_as_first_input)
schema("ReluGrad", domain=MS_DOMAIN, inputs=["dY", "X"], outputs=["dX"])(same_as_inputs)


@gradient("Relu", since=6, emits=("ReluGrad",))
def relu_gradient(g):
    g.node("ReluGrad", [g.GO(0), g.I(0)], [g.GI(0)], domain=MS_DOMAIN)
