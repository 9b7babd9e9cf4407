"""CPU kernels of ConcatFlat (one scaled copy into a flat buffer) and SliceFlat (a view of it),
ops/flat_buffer.py."""
import numpy as np

from ...ops.flat_buffer import slice_bounds
from ...ops.schema import FLOAT_TYPES, MINITRAIN_DOMAIN
from ...registry import register_kernel


def scaled_concat(inputs, dtype, scale):
    """A new 1-D array: scale * concatenate(ravel(inputs)), of `dtype`."""
    flat = np.empty(sum(x.size for x in inputs), dtype)
    offset = 0
    for x in inputs:
        part = flat[offset:offset + x.size]
        if scale == 1.0:
            np.copyto(part, x.reshape(-1))
        else:
            np.multiply(x.reshape(-1), dtype.type(scale), out=part)
        offset += x.size
    return flat


@register_kernel("ConcatFlat", domain=MINITRAIN_DOMAIN, dtypes=FLOAT_TYPES)
def concat_flat(ctx):
    return {"flat": scaled_concat(ctx.inputs, ctx.dtype, ctx.attrs["scale"])}


@register_kernel("SliceFlat", domain=MINITRAIN_DOMAIN, dtypes=FLOAT_TYPES)
def slice_flat(ctx):
    flat = ctx.inputs[0]
    offset, end, shape = slice_bounds(ctx, flat.shape[0])
    return {"output": flat[offset:end].reshape(shape)}
