"""CPU kernel of PRelu (NumPy): the slope broadcast to X."""
import numpy as np

from ...registry import register_kernel


@register_kernel("PRelu", since=7)
def prelu(ctx):
    x, slope = ctx.inputs
    return {"Y": np.asarray(np.where(x > 0, x, x * slope), dtype=x.dtype)}
