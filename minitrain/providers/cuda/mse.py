"""CUDA kernels of MSELoss and MSELossGrad (kernels in cuda/loss.cu), the same registrations as
providers/cpu/mse.py.

MSELossGrad's dY is host-resident (host_inputs): it is the loss's seed, a scalar for the mean
and sum reductions, so the kernel folds it into one factor without reading the device.  The
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
GRAD = Kernel("loss", "mse_grad", "PPPPqT")
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


@register_kernel("MSELossGrad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(0,))
def mse_grad(ctx):
    dy, prediction, target = ctx.inputs
    prov, n = ctx.provider, prediction.size
    grad = prov.empty(prediction.shape, ctx.dtype)
    if n == 0:
        return {"d_prediction": grad}
    reduction = ctx.attrs["reduction"]
    dy_device = 0
    if reduction != "none":
        factor = 2 * float(dy.reshape(-1)[0]) / (n if reduction == "mean" else 1)
    elif dy.size == 1:
        factor = 2 * float(dy.reshape(-1)[0])
    else:       # a per-element seed (reduction none): it goes to the device
        factor = 0.0
        dy_device = prov.from_numpy(np.broadcast_to(dy, prediction.shape).astype(ctx.dtype))
    GRAD.launch_elements(prov, ctx.dtype, n, prediction, target, dy_device, grad, n, factor)
    return {"d_prediction": grad}
