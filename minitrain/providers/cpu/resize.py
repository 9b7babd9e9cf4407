"""CPU kernels of Resize, Upsample and ResizeGrad, one resized axis at a time
(minitrain._ext.resize): nearest mode takes entries along the axis, linear mode blends two; the
gradient adds dY back along the same maps, the axes in reverse order.  float16 is resized in
float32.

The gradient along a short last axis of finite data is a product with the (size, out) matrix
of the map instead (BLAS): there the kernel scatters one element at a time, each add waiting
on the store before it to the same entry.  Entries the map does not use are zeros, which would
turn an infinity elsewhere in the row into NaN, hence finite data only."""
import math

import numpy as np

from ..._ext import resize as _resize
from ...ops.resize import (grad_plan, is_identity, linear_taps, nearest_positions, node_plan, scale_list, settings,
                           source_coordinates)
from ...ops.schema import FLOAT_TYPES, MS_DOMAIN
from ...registry import register_kernel
from ...threads import kernel_threads
from .blas import gemm

DENSE_AXIS_LIMIT = 64   # the longest last axis whose gradient is a matrix product


def _working_dtype(dtype):
    """Linear blends of float16 are computed in float32."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _resize_axis(kernels, src, axis, length, resize, mode, coordinates, nearest):
    """`src` with `axis` made `length` long by kernels[mode] (a forward or gradient kernel of
    minitrain._ext.resize) along the axis's maps: positions in nearest mode, left and right
    positions and right weights in linear mode."""
    shape = list(src.shape)
    shape[axis] = length
    dst = np.empty(shape, src.dtype)
    if src.size == 0 or dst.size == 0:
        dst.fill(0)
        return dst
    coordinate = source_coordinates(coordinates, resize)
    if mode == "nearest":
        maps = (np.ascontiguousarray(nearest_positions(nearest, resize, coordinate), dtype=np.int64),)
    else:
        left, right, weight = linear_taps(resize, coordinate)
        maps = tuple(np.ascontiguousarray(m, dtype=t) for m, t in ((left, np.int64), (right, np.int64), (weight, src.dtype)))
    if kernels is _GRADIENT and axis == src.ndim - 1 and resize.size <= DENSE_AXIS_LIMIT and np.isfinite(src).all():
        return gemm(src.reshape(-1, resize.out), _map_matrix(maps, resize, src.dtype), trans_b=True).reshape(shape)
    outer, inner = math.prod(src.shape[:axis]), math.prod(src.shape[axis + 1:])
    kernels[mode](src.reshape(-1), dst.reshape(-1), outer, resize.size, resize.out, inner, *maps, kernel_threads())
    return dst


def _map_matrix(maps, resize, dtype):
    """The (size, out) matrix of an axis's map: column j holds the weights output j takes of
    each input position (positions that a clamped tap reaches twice add up)."""
    matrix = np.zeros((resize.size, resize.out), dtype)
    columns = np.arange(resize.out)
    if len(maps) == 1:
        matrix[maps[0], columns] = 1
    else:
        left, right, weight = maps
        np.add.at(matrix, (left, columns), 1 - weight)
        np.add.at(matrix, (right, columns), weight)
    return matrix


_FORWARD = {"nearest": _resize.nearest, "linear": _resize.linear}
_GRADIENT = {"nearest": _resize.nearest_grad, "linear": _resize.linear_grad}


def resize_array(x, plan, mode, coordinates, nearest):
    y = np.ascontiguousarray(x, dtype=_working_dtype(x.dtype))
    for axis, resize in enumerate(plan):
        if not is_identity(mode, coordinates, resize):
            y = _resize_axis(_FORWARD, y, axis, resize.out, resize, mode, coordinates, nearest)
    return y.astype(x.dtype, copy=False)


def resize_gradient_array(dy, plan, mode, coordinates, nearest):
    dx = np.ascontiguousarray(dy, dtype=_working_dtype(dy.dtype))
    for axis in reversed(range(len(plan))):
        resize = plan[axis]
        if not is_identity(mode, coordinates, resize):
            dx = _resize_axis(_GRADIENT, dx, axis, resize.size, resize, mode, coordinates, nearest)
    return dx.astype(dy.dtype, copy=False)


@register_kernel("Upsample", since=7, end=8, dtypes=FLOAT_TYPES)
def upsample_7(ctx):
    x = ctx.inputs[0]
    return {"Y": resize_array(x, *node_plan(ctx.fail, 7, ctx.attrs, x.shape, list(ctx.attrs["scales"]), None))}


@register_kernel("Upsample", since=9, dtypes=FLOAT_TYPES, host_inputs=(1,))
@register_kernel("Resize", since=10, end=10, dtypes=FLOAT_TYPES, host_inputs=(1,))
def upsample(ctx):
    x, scales = ctx.inputs
    return {"Y": resize_array(x, *node_plan(ctx.fail, 10, ctx.attrs, x.shape, scale_list(scales), None))}


@register_kernel("Resize", since=11, dtypes=FLOAT_TYPES, host_inputs=(1, 2, 3))
def resize(ctx):
    inputs = list(ctx.inputs) + [None] * (4 - len(ctx.inputs))
    x = inputs[0]
    plan = node_plan(ctx.fail, 19, ctx.attrs, x.shape, scale_list(inputs[2]), scale_list(inputs[3]))
    return {"Y": resize_array(x, *plan)}


@register_kernel("ResizeGrad", domain=MS_DOMAIN, dtypes=FLOAT_TYPES, host_inputs=(2, 3))
def resize_grad(ctx):
    inputs = list(ctx.inputs) + [None] * (4 - len(ctx.inputs))
    dy, x, scales = inputs[0], inputs[1], scale_list(inputs[3])
    plan = grad_plan(ctx.fail, ctx.attrs, x.shape, dy.shape, scales)
    return {"dX": resize_gradient_array(dy, plan, *settings(19, ctx.attrs))}
