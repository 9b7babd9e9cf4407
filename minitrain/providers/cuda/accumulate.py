"""CUDA kernel of InPlaceAccumulator (cuda/accumulate.cu): buffer += scale * value in place,
the scale read from device memory; the same registration as providers/cpu/accumulate.py."""
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel

ACCUMULATE = Kernel("accumulate", "accumulate", "PPqP")


@register_kernel("InPlaceAccumulator", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def accumulate(ctx):
    buffer, value, scale = (ctx.inputs + [None])[:3]
    ACCUMULATE.launch_elements(ctx.provider, ctx.dtype, buffer.size, buffer, value, buffer.size,
                               0 if scale is None else scale)
    return {"accumulated": buffer}
