"""CUDA kernels of InPlaceAccumulator (cuda/accumulate.cu): buffer += scale * value in place,
the scale read from device memory, and of InPlaceAccumulatorV2: buffer = value or buffer +=
value, the overwrite flag read from device memory (so a captured step follows it); the same
registrations as providers/cpu/accumulate.py.  A float32 buffer accumulates a float16 or
bfloat16 value through its own kernel, which widens each element as it reads it."""
import numpy as np

from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel

ACCUMULATE = Kernel("accumulate", "accumulate", "PPqP")
WIDENING_ACCUMULATE = Kernel("accumulate", "accumulate_f32_from", "PPqP")   # picked by the value's type
ACCUMULATE_V2 = Kernel("accumulate", "accumulate_v2", "PPqP")


@register_kernel("InPlaceAccumulator", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def accumulate(ctx):
    buffer, value, scale = (ctx.inputs + [None])[:3]
    kernel, dtype = (ACCUMULATE, ctx.dtype) if value.dtype == buffer.dtype else (WIDENING_ACCUMULATE, value.dtype)
    kernel.launch_elements(ctx.provider, dtype, buffer.size, buffer, value, buffer.size, 0 if scale is None else scale)
    return {"accumulated": buffer}


@register_kernel("InPlaceAccumulatorV2", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES,
                 host_outputs=("updated_flag",))
def accumulate_v2(ctx):
    buffer, value, overwrite = (ctx.inputs + [None])[:3]
    ACCUMULATE_V2.launch_elements(ctx.provider, ctx.dtype, buffer.size, buffer, value, buffer.size,
                                  0 if overwrite is None else overwrite)
    return {"updated_flag": np.ones(1, dtype=np.bool_), "accumulated": buffer}
