"""CUDA kernels of InPlaceAccumulator (cuda/accumulate.cu): buffer += scale * value in place,
the scale read from device memory, and of InPlaceAccumulatorV2: buffer = value or buffer +=
value, the overwrite flag read from device memory (so a captured step follows it); the same
registrations as providers/cpu/accumulate.py.  A float32 buffer accumulates a float16 or
bfloat16 value too, the kernel widening each element as it reads it (the value's type code as
the optimizer's table names a gradient's)."""
import numpy as np

from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .optimizer import GRADIENT_TYPE_CODES

ACCUMULATE = Kernel("accumulate", "accumulate", "PPqPi")
ACCUMULATE_V2 = Kernel("accumulate", "accumulate_v2", "PPqP")


@register_kernel("InPlaceAccumulator", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def accumulate(ctx):
    buffer, value, scale = (ctx.inputs + [None])[:3]
    value_type = 0 if value.dtype == buffer.dtype else GRADIENT_TYPE_CODES[value.dtype]
    ACCUMULATE.launch_elements(ctx.provider, ctx.dtype, buffer.size, buffer, value, buffer.size,
                               0 if scale is None else scale, value_type)
    return {"accumulated": buffer}


@register_kernel("InPlaceAccumulatorV2", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES,
                 host_outputs=("updated_flag",))
def accumulate_v2(ctx):
    buffer, value, overwrite = (ctx.inputs + [None])[:3]
    ACCUMULATE_V2.launch_elements(ctx.provider, ctx.dtype, buffer.size, buffer, value, buffer.size,
                                  0 if overwrite is None else overwrite)
    return {"updated_flag": np.ones(1, dtype=np.bool_), "accumulated": buffer}
