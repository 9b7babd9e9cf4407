"""CPU kernels of broadcasting arithmetic (NumPy ufuncs, vectorised; a vector broadcast over runs of
a tensor (a per-channel scale, a squeeze-excitation gate) in one pass of minitrain._ext.broadcast; a
short vector broadcast over rows is tiled into long rows first) and SumToShape
(minitrain._ext.sum_to_shape where the summed axes lie before and after one run of kept axes,
NumPy otherwise)."""
import functools
import math

import numpy as np

from ..._ext import broadcast as _broadcast
from ..._ext import sum_to_shape as _sums
from ...ops.elementwise import broadcast_axes
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from ...threads import kernel_threads
from .specialized import specialized


# A vector of fewer than SHORT_ROW_ELEMENTS broadcast over rows is tiled to about
# TILED_ROW_ELEMENTS first; NumPy's own inner loop is as fast from 16 elements on.
SHORT_ROW_ELEMENTS = 16
TILED_ROW_ELEMENTS = 256


# the ufuncs whose broadcast of a vector minitrain._ext.broadcast computes (the same roundings)
BROADCAST_KERNELS = {np.add: "add", np.subtract: "sub", np.multiply: "mul"}


def _binary(ufunc, output):
    name = BROADCAST_KERNELS.get(ufunc)

    def kernel(ctx):
        a, b = ctx.inputs[0], ctx.inputs[1]
        layout = vector_layout(a, b) if name else None
        if layout is not None:
            return {output: broadcast_binary(name, a, b, layout)}
        return {output: _tiled_rows(ufunc, a, b) if broadcasts_short_rows(a, b) else ufunc(a, b)}
    return kernel


def vector_layout(a, b):
    """(outer, kept, inner, vector_first) when one float operand has the broadcast shape and the
    other is a vector of its kept entries (more than one, all in one run of axes: middle_layout),
    with runs of inner > 1 or rows of kept >= SHORT_ROW_ELEMENTS; vector_first when the vector
    is `a`.  None otherwise (the NumPy paths)."""
    if a.dtype != b.dtype or a.dtype not in (np.float32, np.float64):
        return None
    return _vector_plan(a.shape, b.shape)


@functools.lru_cache(maxsize=512)
def _vector_plan(a_shape, b_shape):
    """vector_layout of operands of these shapes (a training step asks for the same few)."""
    try:
        shape = np.broadcast_shapes(a_shape, b_shape)
    except ValueError:
        return None
    if a_shape == b_shape or shape not in (a_shape, b_shape):
        return None
    vector_first = shape == b_shape
    big, small = (b_shape, a_shape) if vector_first else (a_shape, b_shape)
    if math.prod(small) <= 1 or math.prod(big) == 0:
        return None
    layout = middle_layout(big, broadcast_axes(big, small))
    if layout is None or (layout[2] == 1 and layout[1] < SHORT_ROW_ELEMENTS):
        return None
    return layout + (vector_first,)


def broadcast_binary(name, a, b, layout):
    """a op b (op: add, sub, mul) for operands of vector_layout `layout`, in one pass."""
    outer, kept, inner, vector_first = layout
    big, vector = (b, a) if vector_first else (a, b)
    y = np.empty(big.shape, big.dtype)
    specialized(_broadcast.binary, y.dtype)(name, np.ascontiguousarray(big).reshape(-1),
                                            np.ascontiguousarray(vector).reshape(-1), y.reshape(-1), outer, kept,
                                            inner, vector_first, kernel_threads())
    return y


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
    """The inputs added in one pass for the first two, in place for the rest.  Inputs of one shape
    (the gradients of a value read by several nodes) skip np.broadcast_shapes, which takes longer
    than adding two small tensors."""
    arrays = [x for x in ctx.inputs if x is not None]
    shapes = [a.shape for a in arrays]
    same = shapes.count(shapes[0]) == len(shapes)
    shape = shapes[0] if same else np.broadcast_shapes(*shapes)
    if len(arrays) > 1 and (same or np.broadcast_shapes(shapes[0], shapes[1]) == shape):
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
    shape = tuple(shape.tolist() if isinstance(shape, np.ndarray) else (int(d) for d in shape))
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
