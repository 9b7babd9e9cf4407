"""CUDA kernels of MSELoss and MSELossGrad (kernels in cuda/loss.cu), the same registrations as
providers/cpu/mse.py.

MSELossGrad reads its dY (the loss's seed) on the device, a scalar or one per element, so a
seed that lives there (a loss scale) costs no host sync and the step stays capturable.  The
mean and sum are reduced in double in a fixed order: per-chunk partial sums, then one block.
"""
import numpy as np

from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .launch import BLOCK, MAX_BLOCK

NONE = Kernel("loss", "mse_none", "PPPq")
PARTIAL = Kernel("loss", "mse_partial", "PPPqq")
FINISH = Kernel("loss", "mse_finish", "PqPd")
GRAD = Kernel("loss", "mse_grad", "PPPPqqT")
MIN_CHUNK, MAX_PARTIALS = 4096, 1024


@register_kernel("MSELoss", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def mse(ctx):
    prediction, target = ctx.inputs
    prov, n = ctx.provider, prediction.size
    reduction = ctx.attrs["reduction"]
    if reduction == "none":
        loss = prov.empty(prediction.shape, ctx.dtype)
        NONE.launch_elements(prov, ctx.dtype, n, prediction, target, loss, n)
        return {"loss": loss}
    if reduction == "mean" and n == 0:
        ctx.fail("mean reduction of an empty prediction")
    # the chunks depend on the size only, so the sum is the same on every device
    chunk = max(MIN_CHUNK, -(-n // MAX_PARTIALS))
    blocks = -(-n // chunk)
    partial = prov.empty((blocks,), np.float64)
    if blocks:
        PARTIAL.launch(prov, ctx.dtype, (blocks, 1, 1), (BLOCK, 1, 1), prediction, target, partial, n, chunk)
    loss = prov.empty((), ctx.dtype)
    FINISH.launch(prov, ctx.dtype, (1, 1, 1), (MAX_BLOCK, 1, 1), partial, blocks, loss,
                  float(n) if reduction == "mean" else 1.0)
    return {"loss": loss}


@register_kernel("MSELossGrad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def mse_grad(ctx):
    dy, prediction, target = ctx.inputs
    prov, n = ctx.provider, prediction.size
    grad = prov.empty(prediction.shape, ctx.dtype)
    if n == 0:
        return {"d_prediction": grad}
    if dy.size not in (1, n):
        ctx.fail(f"input dY of shape {tuple(dy.shape)} is neither a scalar nor the prediction's shape "
                 f"{tuple(prediction.shape)}")
    factor = 2.0 / n if ctx.attrs["reduction"] == "mean" else 2.0
    GRAD.launch_elements(prov, ctx.dtype, n, prediction, target, dy, grad, n, 0 if dy.size == 1 else 1, factor)
    return {"d_prediction": grad}
