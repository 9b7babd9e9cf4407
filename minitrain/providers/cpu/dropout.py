"""CPU kernels of Dropout and DropoutGrad (vectorised NumPy: the random draw dominates)."""
import numpy as np

from ... import random as mt_random
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel


def dropout_settings(ctx, ratio, training_mode):
    """(ratio, training) from the optional inputs, checking that 0 <= ratio < 1 (ONNX's range,
    in training mode or not, as ONNX Runtime checks it)."""
    r = 0.5 if ratio is None else float(ratio.reshape(-1)[0])
    training = False if training_mode is None else bool(training_mode.reshape(-1)[0])
    if not 0 <= r < 1:
        ctx.fail(f"input 'ratio' is {r}; it must be in [0, 1)")
    return r, training


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
