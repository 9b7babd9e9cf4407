"""CPU kernels of MSELoss and MSELossGrad (vectorised NumPy)."""
import numpy as np

from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel


@register_kernel("MSELoss", domain=MS_DOMAIN)
def mse(ctx):
    diff = ctx.inputs[0] - ctx.inputs[1]
    reduction = ctx.attrs["reduction"]
    if reduction == "none":
        return {"loss": diff * diff}
    total = np.dot(diff.reshape(-1), diff.reshape(-1))
    if reduction == "mean":
        if diff.size == 0:
            ctx.fail("mean reduction of an empty prediction")
        total = total / diff.size
    return {"loss": np.array(total, dtype=ctx.dtype)}


@register_kernel("MSELossGrad", domain=MS_DOMAIN)
def mse_grad(ctx):
    dy, prediction, target = ctx.inputs
    grad = prediction - target
    reduction = ctx.attrs["reduction"]
    if reduction == "none":
        grad *= 2 * dy
    elif grad.size:         # an empty prediction has an empty gradient, for the mean too (as PyTorch's)
        factor = 2 * float(dy.reshape(-1)[0]) / (prediction.size if reduction == "mean" else 1)
        grad *= ctx.dtype.type(factor)
    return {"d_prediction": grad}
