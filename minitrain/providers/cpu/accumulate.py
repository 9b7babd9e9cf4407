"""CPU kernels of InPlaceAccumulator (buffer += scale * value; a 16-bit value widened to the
float32 buffer's type first, exactly) and InPlaceAccumulatorV2 (buffer = value or buffer +=
value), in place (NumPy)."""
import numpy as np

from ...ops.schema import FLOAT_TYPES, MS_DOMAIN
from ...registry import register_kernel
from .optimizer import widened


@register_kernel("InPlaceAccumulator", domain=MS_DOMAIN, dtypes=FLOAT_TYPES)
def accumulate(ctx):
    buffer, value, scale = (ctx.inputs + [None])[:3]
    value = widened(value)
    factor = 1.0 if scale is None else float(scale.reshape(-1)[0])
    if factor == 1.0:
        np.add(buffer, value, out=buffer)
    else:
        buffer += ctx.dtype.type(factor) * value
    return {"accumulated": buffer}


@register_kernel("InPlaceAccumulatorV2", domain=MS_DOMAIN, dtypes=FLOAT_TYPES,
                 host_inputs=(2,), host_outputs=("updated_flag",))
def accumulate_v2(ctx):
    buffer, value, overwrite = (ctx.inputs + [None])[:3]
    if overwrite is not None and bool(overwrite.reshape(-1)[0]):
        np.copyto(buffer, value)
    else:
        np.add(buffer, value, out=buffer)
    return {"updated_flag": np.ones(1, dtype=np.bool_), "accumulated": buffer}
