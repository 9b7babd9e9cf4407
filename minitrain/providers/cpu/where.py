"""CPU kernel of Where (NumPy), keyed by the dtype of X and Y (the condition is bool)."""
import numpy as np

from ...registry import register_kernel


@register_kernel("Where", since=9)
def where(ctx):
    condition, x, y = ctx.inputs
    return {"Y": np.asarray(np.where(condition, x, y))}
