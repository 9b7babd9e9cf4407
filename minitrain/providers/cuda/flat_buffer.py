"""CUDA kernels of ConcatFlat (each input copied, or scaled by cuda/flat_buffer.cu, into its
place of the flat buffer) and SliceFlat (a view of it), registered as the CPU's are
(providers/cpu/flat_buffer.py)."""
import pycuda.driver as driver

from ...ops.flat_buffer import slice_bounds
from ...ops.schema import MINITRAIN_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .shape import view

SCALE_COPY = Kernel("flat_buffer", "scale_copy", "PPqT")


def copy_scaled(provider, flat, inputs, scale, stream):
    """Queue flat = scale * concatenate(ravel(inputs)) on `stream` (flat: 1-D, long enough)."""
    address = int(flat.gpudata) if flat.size else 0
    for x in inputs:
        if not x.size:
            continue
        if scale == 1.0:
            driver.memcpy_dtod_async(address, x.gpudata, x.nbytes, stream)
        else:
            SCALE_COPY.launch_elements(provider, flat.dtype, x.size, address, x, x.size, scale, stream=stream)
        address += x.nbytes


@register_kernel("ConcatFlat", domain=MINITRAIN_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def concat_flat(ctx):
    provider = ctx.provider
    flat = provider.empty((sum(x.size for x in ctx.inputs),), ctx.dtype)
    copy_scaled(provider, flat, ctx.inputs, ctx.attrs["scale"], provider.stream)
    return {"flat": flat}


@register_kernel("SliceFlat", domain=MINITRAIN_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def slice_flat(ctx):
    flat = ctx.inputs[0]
    offset, end, shape = slice_bounds(ctx, flat.shape[0])
    return {"output": view(ctx.provider, flat[offset:end], shape)}
