"""CPU kernels of broadcasting arithmetic and SumToShape (NumPy ufuncs, vectorised)."""
import numpy as np

from ...errors import ShapeError
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel


def _binary(ufunc, output):
    def kernel(ctx):
        return {output: ufunc(ctx.inputs[0], ctx.inputs[1])}
    return kernel


register_kernel("Add", since=7)(_binary(np.add, "C"))
register_kernel("Sub", since=7)(_binary(np.subtract, "C"))
register_kernel("Mul", since=7)(_binary(np.multiply, "C"))


@register_kernel("Neg", since=6)
def neg(ctx):
    return {"Y": np.negative(ctx.inputs[0])}


@register_kernel("Sum", since=8)
def sum_(ctx):
    arrays = [x for x in ctx.inputs if x is not None]
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    total = np.array(arrays[0], dtype=ctx.dtype, copy=True) if arrays[0].shape == shape \
        else np.broadcast_to(arrays[0], shape).astype(ctx.dtype)
    for a in arrays[1:]:
        total += a
    return {"sum": total}


def sum_to_shape(x, shape):
    """Sum `x` over the axes along which an array of `shape` was broadcast to x.shape."""
    shape = tuple(int(d) for d in shape)
    lead = x.ndim - len(shape)
    if lead < 0 or any(s not in (1, d) for s, d in zip(shape, x.shape[lead:])):
        raise ShapeError(f"SumToShape: input 'shape' {shape} does not broadcast to input 'X' {x.shape}")
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and x.shape[lead + i] != 1)
    return np.sum(x, axis=axes).reshape(shape) if axes else x.reshape(shape)


@register_kernel("SumToShape", domain=MS_DOMAIN)
def sum_to_shape_kernel(ctx):
    return {"Y": sum_to_shape(ctx.inputs[0], ctx.inputs[1])}
