"""CPU kernels of broadcasting arithmetic (NumPy ufuncs, vectorised; a short vector broadcast over
rows is tiled into long rows first) and SumToShape
(minitrain._ext.sum_to_shape where the summed axes lie before and after one run of kept axes,
NumPy otherwise)."""
import functools
import math

import numpy as np

from ..._ext import sum_to_shape as _sums
from ...ops.elementwise import broadcast_axes
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from ...threads import kernel_threads


# A vector of fewer than SHORT_ROW_ELEMENTS broadcast over rows is tiled to about
# TILED_ROW_ELEMENTS first; NumPy's own inner loop is as fast from 16 elements on.
SHORT_ROW_ELEMENTS = 16
TILED_ROW_ELEMENTS = 256


def _binary(ufunc, output):
    def kernel(ctx):
        a, b = ctx.inputs[0], ctx.inputs[1]
        return {output: _tiled_rows(ufunc, a, b) if broadcasts_short_rows(a, b) else ufunc(a, b)}
    return kernel


def broadcasts_short_rows(a, b):
    """Whether one float operand is a short vector (a bias, a per-channel scale) that is the
    other's trailing dims, broadcast over its rows: NumPy would then loop over those rows one
    short inner loop each."""
    if not 1 < min(a.size, b.size) < SHORT_ROW_ELEMENTS or a.size == b.size or a.dtype != b.dtype \
            or a.dtype not in (np.float32, np.float64):
        return False        # a scalar is one long inner loop already
    big, small = (a, b) if a.size > b.size else (b, a)
    trailing = small.shape[next((i for i, d in enumerate(small.shape) if d != 1), small.ndim):]
    return len(trailing) <= big.ndim and big.flags.c_contiguous and big.shape[big.ndim - len(trailing):] == trailing


def _tiled_rows(ufunc, a, b):
    """ufunc(a, b) for operands as broadcasts_short_rows says: the vector tiled to about
    TILED_ROW_ELEMENTS elements and the other operand viewed as rows of that length, so that
    each inner loop is long; the same elements, computed in the same order."""
    big = a if a.size > b.size else b
    small = (b if big is a else a).reshape(-1)
    rows = big.size // small.size
    copies = math.gcd(rows, TILED_ROW_ELEMENTS // small.size)
    tiled = np.empty((copies, small.size), small.dtype)
    tiled[...] = small
    wide = big.reshape(rows // copies, copies * small.size)
    out = ufunc(wide, tiled.reshape(-1)) if big is a else ufunc(tiled.reshape(-1), wide)
    return out.reshape(np.broadcast_shapes(a.shape, b.shape))


register_kernel("Add", since=7)(_binary(np.add, "C"))
register_kernel("Sub", since=7)(_binary(np.subtract, "C"))
register_kernel("Mul", since=7)(_binary(np.multiply, "C"))
register_kernel("Div", since=7)(_binary(np.divide, "C"))


@register_kernel("Neg", since=6)
def neg(ctx):
    return {"Y": np.negative(ctx.inputs[0])}


@register_kernel("Sum", since=8)
def sum_(ctx):
    arrays = [x for x in ctx.inputs if x is not None]
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    if len(arrays) > 1 and np.broadcast_shapes(arrays[0].shape, arrays[1].shape) == shape:
        total = np.add(arrays[0], arrays[1], dtype=ctx.dtype)     # the first two in one pass, no copy first
        rest = arrays[2:]
    else:
        total = np.array(arrays[0], dtype=ctx.dtype, copy=True) if arrays[0].shape == shape \
            else np.broadcast_to(arrays[0], shape).astype(ctx.dtype)
        rest = arrays[1:]
    for a in rest:
        total += a
    return {"sum": total}


def middle_layout(x_shape, axes):
    """(outer, kept, inner) when the summed `axes` of x_shape, its axes of size 1 left aside,
    are all before or after its kept ones; None otherwise."""
    sizes = [(d, a in axes) for a, d in enumerate(x_shape) if d != 1]
    kept = [k for k, (_, summed) in enumerate(sizes) if not summed]
    first, last = (kept[0], kept[-1] + 1) if kept else (len(sizes), len(sizes))
    if any(summed for _, summed in sizes[first:last]):
        return None
    return tuple(math.prod(d for d, _ in part) for part in (sizes[:first], sizes[first:last], sizes[last:]))


@functools.lru_cache(maxsize=512)
def _sum_plan(x_shape, shape):
    """(summed axes, middle_layout of them) of a SumToShape from x_shape to shape: a training
    step asks for the same few shapes every time."""
    axes = broadcast_axes(x_shape, shape)
    return axes, middle_layout(x_shape, axes)


def sum_to_shape(x, shape):
    """Sum `x` over the axes along which an array of `shape` was broadcast to x.shape."""
    shape = tuple(int(d) for d in shape)
    axes, layout = _sum_plan(x.shape, shape)
    if not axes:
        return x.reshape(shape)
    if layout is None or x.dtype not in (np.float32, np.float64):
        return np.sum(x, axis=axes).reshape(shape)
    out = np.empty(shape, x.dtype)
    _sums.middle_sums(np.ascontiguousarray(x).reshape(-1), out.reshape(-1), *layout, kernel_threads())
    return out


@register_kernel("SumToShape", domain=MS_DOMAIN)
def sum_to_shape_kernel(ctx):
    return {"Y": sum_to_shape(ctx.inputs[0], ctx.inputs[1])}
