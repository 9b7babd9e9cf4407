"""CUDA kernels of the re-layout ops that only reinterpret: Identity, Flatten and Reshape, and
the metadata ops Shape and Size, whose results live in host memory.  Like the CPU's, they
return views of their (contiguous) input, sharing its device memory; Transpose, which moves
data, is in structural.py."""
import math

import numpy as np

from ...ops.shape import reshape_target, shape_slice
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES


def view(provider, x, shape):
    """x with `shape` (as many elements), sharing its memory; an empty x has no memory to
    share, so it gets a new empty array."""
    shape = tuple(int(d) for d in shape)
    return x.reshape(shape) if x.size else provider.empty(shape, x.dtype)


@register_kernel("Identity", since=1, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def identity(ctx):
    return {"output": ctx.inputs[0]}


@register_kernel("Flatten", since=1, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def flatten(ctx):
    x = ctx.inputs[0]
    axis = ctx.attrs["axis"] + x.ndim if ctx.attrs["axis"] < 0 else ctx.attrs["axis"]
    return {"output": view(ctx.provider, x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))}


@register_kernel("Reshape", since=5, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
def reshape(ctx):
    x, target = ctx.inputs[0], ctx.inputs[1]
    shape = reshape_target(ctx, x.shape, [int(d) for d in target], ctx.attrs.get("allowzero", 0))
    return {"reshaped": view(ctx.provider, x, shape)}


@register_kernel("Shape", since=1, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_outputs=("shape",))
def shape(ctx):
    dims = ctx.inputs[0].shape
    begin, stop = shape_slice(len(dims), ctx.attrs.get("start", 0), ctx.attrs.get("end"))
    return {"shape": np.array(dims[begin:stop], dtype=np.int64)}


@register_kernel("Size", since=1, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_outputs=("size",))
def size(ctx):
    return {"size": np.array(math.prod(ctx.inputs[0].shape), dtype=np.int64)}
