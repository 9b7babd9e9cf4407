"""CPU kernels of Resize, Upsample and ResizeGrad (NumPy), one resized axis at a time: nearest
mode takes entries along the axis, linear mode blends two; the gradient adds dY back along the
same maps (np.add.at), the axes in reverse order."""
import numpy as np

from ...ops.resize import (grad_plan, is_identity, linear_taps, nearest_positions, node_plan, scale_list, settings,
                           source_coordinates)
from ...ops.schema import FLOAT_TYPES, MS_DOMAIN
from ...registry import register_kernel


def _working_dtype(dtype):
    """Linear blends of float16 are computed in float32."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def resize_array(x, plan, mode, coordinates, nearest):
    y = x.astype(_working_dtype(x.dtype), copy=False)
    for axis, resize in enumerate(plan):
        if is_identity(mode, coordinates, resize):
            continue
        coordinate = source_coordinates(coordinates, resize)
        if mode == "nearest":
            y = np.take(y, nearest_positions(nearest, resize, coordinate), axis=axis)
            continue
        left, right, weight = linear_taps(resize, coordinate)
        shape = [1] * y.ndim
        shape[axis] = -1
        weight = weight.astype(y.dtype).reshape(shape)
        y = np.take(y, left, axis=axis) * (1 - weight) + np.take(y, right, axis=axis) * weight
    return np.ascontiguousarray(y, dtype=x.dtype)


def resize_gradient_array(dy, plan, mode, coordinates, nearest):
    dx = dy.astype(_working_dtype(dy.dtype), copy=False)
    for axis in reversed(range(len(plan))):
        resize = plan[axis]
        if is_identity(mode, coordinates, resize):
            continue
        coordinate = source_coordinates(coordinates, resize)
        rows = np.moveaxis(dx, axis, 0)
        folded = np.zeros((resize.size,) + rows.shape[1:], dtype=dx.dtype)
        if mode == "nearest":
            np.add.at(folded, nearest_positions(nearest, resize, coordinate), rows)
        else:
            left, right, weight = linear_taps(resize, coordinate)
            weight = weight.astype(dx.dtype).reshape((-1,) + (1,) * (rows.ndim - 1))
            np.add.at(folded, left, rows * (1 - weight))
            np.add.at(folded, right, rows * weight)
        dx = np.moveaxis(folded, 0, axis)
    return np.ascontiguousarray(dx, dtype=dy.dtype)


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
