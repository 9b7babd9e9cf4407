"""CUDA kernels of the structural ops (cuda/structural.cu), registered as the CPU's are, for
the float types (int64 shape arithmetic stays on the host, where the CPU kernels serve it):
Transpose, Concat, Split, Slice, SliceGrad, Expand, Squeeze, Unsqueeze, Tile, Pad, PadGrad, Gather,
GatherGrad, Resize, Upsample and ResizeGrad.

Layouts are planned here, as the validation is: every copy is one strided copy (a StridedPlan
of source and destination element strides, pointers offset to the first element), Squeeze and
Unsqueeze are views, Pad's reflect/edge/wrap maps and Resize's coordinates are computed on the
device from per-axis sizes passed by value.  No kernel waits for the host, so a captured step
stays whole; Gather's indices, read from host memory and checked there, reach the device
through provider.uploaded.
"""
import math

import numpy as np

from ...ops.concat import PIECES, concat_axis, split_plan
from ...ops.expand import squeezed_shape, unsqueezed_shape
from ...ops.gather import gather_grad_plan, gather_plan
from ...ops.pad import MODES, WRAP_MODES, pad_arguments, pad_grad_axes
from ...ops.resize import LEGACY_NEAREST, NEAREST_MODES, grad_plan, is_identity, node_plan, scale_list, settings
from ...ops.schema import MS_DOMAIN
from ...ops.slice import slice_ranges
from ...ops.tile import check_repeats
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .driver import device_ptr
from .elementwise import broadcast_strides
from .launch import MAX_RANK
from .layout import concat_pieces, copy_strided, dense_strides, split_pieces
from .shape import view

_FILL = Kernel("structural", "fill", "PqT")
_PAD_MAP = Kernel("structural", "pad_map", "PPqi" + "q" * (4 * MAX_RANK) + "i")
_PAD_FOLD = Kernel("structural", "pad_fold", "PPqqqqqi")
_GATHER = Kernel("structural", "gather", "PPPqqqq")
_GATHER_GRAD = Kernel("structural", "gather_grad", "PPPqqqq")
AXIS = "qqdqqq"     # struct ResizeAxis: size, out, scale, coordinates, nearest, linear
_RESIZE = Kernel("structural", "resize_axis", "PPqq" + AXIS)
_RESIZE_GRAD = Kernel("structural", "resize_axis_grad", "PPqq" + AXIS)

PAD_MODES = {"constant": 0, "reflect": 1, "edge": 2, "wrap": 3}
COORDINATES = {"half_pixel": 0, "pytorch_half_pixel": 1, "align_corners": 2, "asymmetric": 3,
               "half_pixel_symmetric": 4}
ROUNDING = {mode: i for i, mode in enumerate(NEAREST_MODES)}


def address(value, elements=0):
    """The device address of `value`'s element `elements` (a flat offset)."""
    return device_ptr(value) + int(elements) * value.dtype.itemsize


def gathered(provider, x, offset, strides, shape):
    """A new dense array of `shape` holding x's elements from flat `offset` along `strides`."""
    out = provider.empty(shape, x.dtype)
    copy_strided(provider, x.dtype, address(x, offset), strides, address(out), dense_strides(shape), shape)
    return out


def fill(provider, value, number):
    if value.size == 0:
        return
    if number == 0:
        provider.fill_zero(value)
    else:
        _FILL.launch_elements(provider, value.dtype, value.size, value, value.size, float(number))


def _ints(value):
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


# --------------------------------------------------------------------------- Transpose, Concat, Split
@register_kernel("Transpose", since=1, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def transpose(ctx):
    """One strided copy, whatever the rank (beyond MAX_RANK merged dims, a launch per leading
    index)."""
    x = ctx.inputs[0]
    perm = ctx.attrs["perm"]
    perm = tuple(reversed(range(x.ndim))) if perm is None else tuple(perm)
    strides = dense_strides(x.shape)
    return {"transposed": gathered(ctx.provider, x, 0, [strides[p] for p in perm], tuple(x.shape[p] for p in perm))}



@register_kernel("Concat", since=1, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def concat(ctx):
    """The inputs' rows side by side, the rows being what lies under the axis: a launch per
    PIECES_PER_LAUNCH inputs."""
    inputs = ctx.inputs
    axis = concat_axis(ctx.fail, ctx.attrs["axis"], [x.shape for x in inputs])
    shape = list(inputs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in inputs)
    out = ctx.provider.empty(shape, inputs[0].dtype)
    inner = math.prod(shape[axis + 1:])
    concat_pieces(ctx.provider, out.dtype, out, inputs, [x.shape[axis] * inner for x in inputs],
                  math.prod(shape[:axis]))
    return {"concat_result": out}


def _split(ctx, split, version):
    """Every wanted output's rows from its columns of x's rows (see concat)."""
    x = ctx.inputs[0]
    axis, sizes = split_plan(ctx.fail, version, ctx.attrs, x.shape, split, ctx.wanted)
    out = {name: ctx.provider.empty(x.shape[:axis] + (size,) + x.shape[axis + 1:], x.dtype)
           for name, size in zip(PIECES, sizes) if ctx.wants(name)}
    inner = math.prod(x.shape[axis + 1:])
    split_pieces(ctx.provider, x.dtype, x, [out.get(name) for name in PIECES[:len(sizes)]],
                 [size * inner for size in sizes], math.prod(x.shape[:axis]))
    return out


@register_kernel("Split", since=2, end=12, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def split_attribute(ctx):
    return _split(ctx, ctx.attrs["split"], 2)


@register_kernel("Split", since=13, end=17, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
def split_13(ctx):
    return _split(ctx, _ints(ctx.inputs[1]) if len(ctx.inputs) > 1 else None, 13)


@register_kernel("Split", since=18, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
def split(ctx):
    return _split(ctx, _ints(ctx.inputs[1]) if len(ctx.inputs) > 1 else None, 18)


# --------------------------------------------------------------------------- Slice, SliceGrad
def slice_layout(shape, ranges):
    """(flat offset of the first element, element strides, shape) of x[ranges] for a dense x."""
    strides, offset, steps, dims = dense_strides(shape), 0, [], []
    for d, r, stride in zip(shape, ranges, strides):
        start, stop, step = r.indices(d)
        length = len(range(start, stop, step))
        offset += start * stride if length else 0
        steps.append(step * stride)
        dims.append(length)
    return offset, steps, tuple(dims)


def _index_inputs(inputs):
    return [_ints(v) for v in (list(inputs) + [None] * 4)[:4]]


@register_kernel("Slice", since=1, end=9, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def slice_attributes(ctx):
    x = ctx.inputs[0]
    ranges = slice_ranges(ctx.fail, x.shape, ctx.attrs["starts"], ctx.attrs["ends"], ctx.attrs["axes"])
    return {"output": gathered(ctx.provider, x, *slice_layout(x.shape, ranges))}


@register_kernel("Slice", since=10, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1, 2, 3, 4))
def slice_(ctx):
    x = ctx.inputs[0]
    ranges = slice_ranges(ctx.fail, x.shape, *_index_inputs(ctx.inputs[1:]))
    return {"output": gathered(ctx.provider, x, *slice_layout(x.shape, ranges))}


@register_kernel("SliceGrad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1, 2, 3, 4, 5))
def slice_grad(ctx):
    dy, shape = ctx.inputs[0], tuple(_ints(ctx.inputs[1]))
    if any(d < 0 for d in shape):
        ctx.fail(f"input 'shape' {shape} holds a negative dim")
    offset, steps, dims = slice_layout(shape, slice_ranges(ctx.fail, shape, *_index_inputs(ctx.inputs[2:])))
    if dims != dy.shape:
        ctx.fail(f"input 'dY' has shape {dy.shape}; expected {dims} (the slice of an input of shape {shape})")
    dx = ctx.provider.empty(shape, dy.dtype)
    ctx.provider.fill_zero(dx)
    copy_strided(ctx.provider, dy.dtype, address(dy), dense_strides(dims), address(dx, offset), steps, dims)
    return {"dX": dx}


# --------------------------------------------------------------------------- Expand, Squeeze, Unsqueeze, Tile
@register_kernel("Expand", since=8, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
def expand(ctx):
    x, target = ctx.inputs[0], tuple(_ints(ctx.inputs[1]))
    if any(d < 0 for d in target):
        ctx.fail(f"input 'shape' {target} holds a negative dim")
    try:
        shape = np.broadcast_shapes(x.shape, target)
    except ValueError:
        ctx.fail(f"input 'input' {x.shape} does not broadcast with input 'shape' {target}")
    return {"Y": gathered(ctx.provider, x, 0, broadcast_strides(x.shape, len(shape)), shape)}


@register_kernel("Unsqueeze", since=1, end=12, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def unsqueeze_attribute_axes(ctx):
    x = ctx.inputs[0]
    return {"expanded": view(ctx.provider, x, unsqueezed_shape(ctx.fail, x.shape, ctx.attrs["axes"]))}


@register_kernel("Unsqueeze", since=13, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
def unsqueeze(ctx):
    x = ctx.inputs[0]
    return {"expanded": view(ctx.provider, x, unsqueezed_shape(ctx.fail, x.shape, _ints(ctx.inputs[1])))}


@register_kernel("Squeeze", since=1, end=12, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def squeeze_attribute_axes(ctx):
    x = ctx.inputs[0]
    return {"squeezed": view(ctx.provider, x, squeezed_shape(ctx.fail, x.shape, ctx.attrs["axes"]))}


@register_kernel("Squeeze", since=13, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
def squeeze(ctx):
    x = ctx.inputs[0]
    axes = _ints(ctx.inputs[1]) if len(ctx.inputs) > 1 else None
    return {"squeezed": view(ctx.provider, x, squeezed_shape(ctx.fail, x.shape, axes))}


@register_kernel("Tile", since=6, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
def tile(ctx):
    """A copy over (r0, d0, r1, d1, ...) that steps 0 along each repeat axis."""
    x, repeats = ctx.inputs
    if repeats.ndim != 1:
        ctx.fail(f"input 'repeats' has shape {repeats.shape}; expected a 1-D tensor")
    repeats = check_repeats(ctx.fail, x.ndim, repeats)
    interleaved, strides = [], []
    for d, r, stride in zip(x.shape, repeats, dense_strides(x.shape)):
        interleaved += [r, d]
        strides += [0, stride]
    out = gathered(ctx.provider, x, 0, strides, tuple(interleaved))
    return {"output": view(ctx.provider, out, tuple(d * r for d, r in zip(x.shape, repeats)))}


# --------------------------------------------------------------------------- Pad, PadGrad
def _pad(ctx, modes):
    x = ctx.inputs[0]
    mode, pairs, shape, value = pad_arguments(ctx, modes)
    y = ctx.provider.empty(shape, x.dtype)
    if y.size == 0:
        return {"output": y}
    if mode == "constant":
        fill(ctx.provider, y, float(value))
        kept = tuple(d - max(-b, 0) - max(-e, 0) for d, (b, e) in zip(x.shape, pairs))
        if min(kept, default=1) > 0:
            x_strides, y_strides = dense_strides(x.shape), dense_strides(shape)
            source = sum(max(-b, 0) * s for (b, _), s in zip(pairs, x_strides))
            target = sum(max(b, 0) * s for (b, _), s in zip(pairs, y_strides))
            copy_strided(ctx.provider, x.dtype, address(x, source), x_strides, address(y, target), y_strides, kept)
        return {"output": y}
    if x.ndim > MAX_RANK:
        ctx.fail(f"mode {mode!r} pads at most {MAX_RANK} axes on CUDA, not {x.ndim}")
    fill_rank = [0] * (MAX_RANK - x.ndim)
    plan = (list(shape) + fill_rank + list(x.shape) + fill_rank + [b for b, _ in pairs] + fill_rank +
            dense_strides(x.shape) + fill_rank)
    _PAD_MAP.launch_elements(ctx.provider, x.dtype, y.size, x, y, y.size, x.ndim, *plan, PAD_MODES[mode])
    return {"output": y}


@register_kernel("Pad", since=2, end=10, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def pad_attributes(ctx):
    return _pad(ctx, MODES)


@register_kernel("Pad", since=11, end=18, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1, 2, 3))
def pad_11(ctx):
    return _pad(ctx, MODES)


@register_kernel("Pad", since=19, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1, 2, 3))
def pad(ctx):
    return _pad(ctx, WRAP_MODES)


@register_kernel("PadGrad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1, 2))
def pad_grad(ctx):
    """dY folded back one padded axis at a time."""
    dy, mode = ctx.inputs[0], ctx.attrs["mode"]
    dx = dy
    for axis, begin, size in pad_grad_axes(ctx):
        length = dx.shape[axis]
        folded = ctx.provider.empty(dx.shape[:axis] + (size,) + dx.shape[axis + 1:], dy.dtype)
        if folded.size:
            _PAD_FOLD.launch_elements(ctx.provider, dy.dtype, folded.size, dx, folded, folded.size,
                                      math.prod(dx.shape[axis + 1:]), length, size, begin, PAD_MODES[mode])
        dx = folded
    if dx is dy:
        dx = ctx.provider.empty(dy.shape, dy.dtype)
        ctx.provider.copy_into(dx, dy)
    return {"dX": dx}


# --------------------------------------------------------------------------- Gather, GatherGrad
def _gather_geometry(shape, axis, count):
    """(inner, count, dim) of a gather along `axis` of data of `shape`."""
    return math.prod(shape[axis + 1:]), count, shape[axis]


@register_kernel("Gather", since=1, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
def gather(ctx):
    data, indices = ctx.inputs
    axis, index = gather_plan(ctx.fail, ctx.attrs["axis"], data.shape, indices)
    y = ctx.provider.empty(data.shape[:axis] + index.shape + data.shape[axis + 1:], data.dtype)
    if y.size:
        on_device = ctx.provider.uploaded(lambda: index, index.shape, np.int64)
        _GATHER.launch_elements(ctx.provider, data.dtype, y.size, data, on_device, y, y.size,
                                *_gather_geometry(data.shape, axis, index.size))
    return {"output": y}


@register_kernel("GatherGrad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(0, 1))
def gather_grad(ctx):
    shape, indices, dy = ctx.inputs
    shape, axis, index = gather_grad_plan(ctx.fail, ctx.attrs["axis"], shape, indices, dy.shape)
    dx = ctx.provider.empty(shape, dy.dtype)
    if dx.size:
        if index.size == 0:
            ctx.provider.fill_zero(dx)
        else:
            on_device = ctx.provider.uploaded(lambda: index, index.shape, np.int64)
            _GATHER_GRAD.launch_elements(ctx.provider, dy.dtype, dx.size, dy, on_device, dx, dx.size,
                                         *_gather_geometry(shape, axis, index.size))
    return {"dX": dx}


# --------------------------------------------------------------------------- Resize, Upsample, ResizeGrad
def _axis_args(resize, mode, coordinates, nearest):
    """The ResizeAxis struct of one axis; nearest_mode "simple" settles per axis here."""
    if nearest == LEGACY_NEAREST:
        nearest = "floor" if resize.scale >= 1 else "ceil"
    return (resize.size, resize.out, resize.scale, COORDINATES[coordinates], ROUNDING[nearest],
            int(mode == "linear"))


def resize_device(provider, x, plan, mode, coordinates, nearest):
    y = x
    for axis, resize in enumerate(plan):
        if is_identity(mode, coordinates, resize):
            continue
        out = provider.empty(y.shape[:axis] + (resize.out,) + y.shape[axis + 1:], x.dtype)
        if out.size:
            _RESIZE.launch_elements(provider, x.dtype, out.size, y, out, out.size, math.prod(y.shape[axis + 1:]),
                                    *_axis_args(resize, mode, coordinates, nearest))
        y = out
    return y


def resize_grad_device(provider, dy, plan, mode, coordinates, nearest):
    dx = dy
    for axis in reversed(range(len(plan))):
        resize = plan[axis]
        if is_identity(mode, coordinates, resize):
            continue
        folded = provider.empty(dx.shape[:axis] + (resize.size,) + dx.shape[axis + 1:], dy.dtype)
        if folded.size:
            _RESIZE_GRAD.launch_elements(provider, dy.dtype, folded.size, dx, folded, folded.size,
                                         math.prod(dx.shape[axis + 1:]),
                                         *_axis_args(resize, mode, coordinates, nearest))
        dx = folded
    if dx is dy:
        dx = provider.empty(dy.shape, dy.dtype)
        provider.copy_into(dx, dy)
    return dx


@register_kernel("Upsample", since=7, end=8, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def upsample_7(ctx):
    x = ctx.inputs[0]
    plan = node_plan(ctx.fail, 7, ctx.attrs, x.shape, list(ctx.attrs["scales"]), None)
    return {"Y": resize_device(ctx.provider, x, *plan)}


@register_kernel("Upsample", since=9, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
@register_kernel("Resize", since=10, end=10, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
def upsample(ctx):
    x, scales = ctx.inputs
    plan = node_plan(ctx.fail, 10, ctx.attrs, x.shape, scale_list(scales), None)
    return {"Y": resize_device(ctx.provider, x, *plan)}


@register_kernel("Resize", since=11, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1, 2, 3))
def resize(ctx):
    inputs = list(ctx.inputs) + [None] * (4 - len(ctx.inputs))
    x = inputs[0]
    plan = node_plan(ctx.fail, 19, ctx.attrs, x.shape, scale_list(inputs[2]), scale_list(inputs[3]))
    return {"Y": resize_device(ctx.provider, x, *plan)}


@register_kernel("ResizeGrad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(2, 3))
def resize_grad(ctx):
    inputs = list(ctx.inputs) + [None] * (4 - len(ctx.inputs))
    dy, x, scales = inputs[0], inputs[1], scale_list(inputs[3])
    plan = grad_plan(ctx.fail, ctx.attrs, x.shape, dy.shape, scales)
    return {"dX": resize_grad_device(ctx.provider, dy, plan, *settings(19, ctx.attrs))}
