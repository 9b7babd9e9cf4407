"""CPU kernel of Tile (NumPy)."""
import numpy as np

from ...ops.tile import check_repeats
from ...ops.schema import DATA_TYPES
from ...registry import register_kernel


@register_kernel("Tile", since=6, dtypes=DATA_TYPES, host_inputs=(1,))
def tile(ctx):
    x, repeats = ctx.inputs
    if repeats.ndim != 1:
        ctx.fail(f"input 'repeats' has shape {repeats.shape}; expected a 1-D tensor")
    repeats = check_repeats(ctx.fail, x.ndim, repeats)
    return {"output": np.tile(x, repeats) if x.ndim else x.copy()}
