"""MSELoss (com.microsoft): the mean squared error between a prediction and a target of the same
shape, reduced by mean (default), sum or none, and MSELossGrad, its gradient with respect to
the prediction (the target is treated as data).  ONNX has no such op; ONNX Runtime composes it
from Sub, Pow and ReduceMean: one node does it in one pass here."""
from .gradients import gradient
from .schema import MS_DOMAIN, Attr, schema
from .shape_utils import shapes_differ

MSE_ATTRS = {"reduction": Attr("string", "mean")}


def _check(ctx, a, b):
    if ctx.attrs["reduction"] not in ("mean", "sum", "none"):
        ctx.attr_fail("reduction", "must be one of 'mean', 'sum', 'none'")
    if shapes_differ(a, b):
        ctx.fail(f"inputs 'prediction' {tuple(a)} and 'target' {tuple(b)} must have the same shape")


@schema("MSELoss", domain=MS_DOMAIN, inputs=["prediction", "target"], outputs=["loss"], attrs=MSE_ATTRS)
def infer_mse(ctx):
    """loss: a scalar (mean, sum) or the elementwise squared errors (none)."""
    _check(ctx, ctx.shape(0), ctx.shape(1))
    return [ctx.out(() if ctx.attrs["reduction"] != "none" else ctx.shape(0))]


@schema("MSELossGrad", domain=MS_DOMAIN, inputs=["dY", "prediction", "target"], outputs=["d_prediction"],
        attrs=MSE_ATTRS)
def infer_mse_grad(ctx):
    """d_prediction = 2 (prediction - target) dY (/ size for mean); dY has the loss's shape."""
    _check(ctx, ctx.shape(1), ctx.shape(2))
    if ctx.attrs["reduction"] == "none":
        ctx.require_shape(0, ctx.shape(1), "the prediction's shape, as the loss of reduction 'none'")
    else:
        ctx.require_scalar(0, f"the loss of reduction {ctx.attrs['reduction']!r} is a scalar")
    return [ctx.out(ctx.shape(1))]


@gradient("MSELoss", domain=MS_DOMAIN, since=1, emits=("MSELossGrad",))
def mse_gradient(g):
    g.node("MSELossGrad", [g.GO(0), g.I(0), g.I(1)], [g.GI(0)], g.attrs, domain=MS_DOMAIN)
