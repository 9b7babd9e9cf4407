"""CPU kernels of MixedPrecisionScale and LossScaleUpdate (NumPy; ops/loss_scale.py)."""
import math

import numpy as np

from ...ops.compare import ONNX_DTYPES
from ...ops.schema import FLOAT_TYPES, MS_DOMAIN
from ...registry import register_kernel


@register_kernel("MixedPrecisionScale", domain=MS_DOMAIN, dtypes=FLOAT_TYPES)
def mixed_precision_scale(ctx):
    """X * S in float32 (float64 for a float64 X), rounded once to `to`."""
    scale, x = ctx.inputs
    compute = np.float64 if x.dtype == np.float64 else np.float32
    product = np.multiply(x, compute(scale.reshape(-1)[0]), dtype=compute)
    return {"Y": product.astype(ONNX_DTYPES[ctx.attrs["to"]], copy=False)}


@register_kernel("LossScaleUpdate", domain=MS_DOMAIN, dtypes=FLOAT_TYPES)
def loss_scale_update(ctx):
    a = ctx.attrs
    grad_norm, scale, tracker, skipped = ctx.inputs
    found_inf = not math.isfinite(float(grad_norm.reshape(-1)[0]))
    if found_inf:
        scale[...] = scale * np.float32(a["backoff_factor"])
        tracker[...] = 0
        skipped[...] += 1
    elif tracker.reshape(-1)[0] + 1 >= a["growth_interval"]:
        with np.errstate(over="ignore"):
            grown = scale * np.float32(a["growth_factor"])
        if np.all(np.isfinite(grown)):
            scale[...] = grown
        tracker[...] = 0
    else:
        tracker[...] += 1
    return {"found_inf": np.array(found_inf)}
