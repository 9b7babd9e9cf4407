"""CPU kernel of InPlaceAccumulator: buffer += scale * value in place (NumPy)."""
import numpy as np

from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel


@register_kernel("InPlaceAccumulator", domain=MS_DOMAIN, dtypes=(np.float16, np.float32, np.float64))
def accumulate(ctx):
    buffer, value, scale = (ctx.inputs + [None])[:3]
    factor = 1.0 if scale is None else float(scale.reshape(-1)[0])
    if factor == 1.0:
        np.add(buffer, value, out=buffer)
    else:
        buffer += ctx.dtype.type(factor) * value
    return {"accumulated": buffer}
