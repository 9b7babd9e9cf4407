"""CPU kernels of Dropout and DropoutGrad (vectorised NumPy: the random draw dominates)."""
import numpy as np

from ... import random as mt_random
from ...ops.dropout import dropout_settings
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel


@register_kernel("Dropout", since=12)
def dropout(ctx):
    x, ratio, training_mode = (ctx.inputs + [None, None])[:3]
    r, training = dropout_settings(ctx, ratio, training_mode)
    if not training or r == 0:
        return {"output": x.copy(), "mask": np.ones(x.shape, dtype=bool)}
    seed = ctx.attrs.get("seed")
    rng = np.random.default_rng(seed) if seed is not None else mt_random.generator()
    mask = rng.random(x.shape, dtype=np.float32 if ctx.dtype == np.float32 else np.float64) >= r
    y = x * mask
    y *= ctx.dtype.type(1 / (1 - r))
    return {"output": y, "mask": mask}


@register_kernel("DropoutGrad", domain=MS_DOMAIN)
def dropout_grad(ctx):
    dy, mask, ratio, training_mode = (ctx.inputs + [None, None])[:4]
    r, training = dropout_settings(ctx, ratio, training_mode)
    if not training or r == 0:
        return {"dX": dy.copy()}
    dx = dy * mask
    dx *= ctx.dtype.type(1 / (1 - r))
    return {"dX": dx}
