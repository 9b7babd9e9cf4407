"""CUDA kernels of the elementwise math beyond arithmetic (cuda/math_extra.cu): Abs, Sign, Log,
Exp, Sqrt, Erf and Reciprocal; Pow, Max, Min and PRelu, broadcasting as Add does
(elementwise.py); Clip, its bounds from the attributes (opset 6) or read on the device from
the optional inputs (11+), so a step holding it stays on the device and capturable; and
com.microsoft Scale, its factor from host memory as on the CPU."""
import numpy as np

from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .elementwise import broadcast_strides, packs
from .layout import collapse, plan_args, plan_signature

_UNARY = {name: Kernel("math_extra", name, "PPq") for name in ("abs", "sign", "log", "exp", "sqrt", "erf", "reciprocal")}
_FLAT = {name: Kernel("math_extra", name, "PPPq") for name in ("pow", "max", "min", "prelu")}
_BCAST = {name: Kernel("math_extra", f"{name}_bcast", "PPPq" + plan_signature(2)) for name in _FLAT}
_CLIP = Kernel("math_extra", "clip", "PPqTT")
_CLIP_BOUNDS = Kernel("math_extra", "clip_bounds", "PPqPP")
_SCALE = Kernel("math_extra", "scale", "PPqTi")


def unary(provider, name, x):
    y = provider.empty(x.shape, x.dtype)
    _UNARY[name].launch_elements(provider, x.dtype, packs(x), x, y, x.size)
    return y


def binary(provider, name, a, b, out=None):
    """out = name(a, b) with NumPy broadcasting; `out` (of the broadcast shape, possibly `a`
    itself) or a new array."""
    shape = np.broadcast_shapes(a.shape, b.shape)
    if out is None:
        out = provider.empty(shape, a.dtype)
    if out.size == 0:
        return out
    if a.size == b.size == out.size:
        _FLAT[name].launch_elements(provider, out.dtype, packs(out), a, b, out, out.size)
    else:
        sizes, strides = collapse(shape, broadcast_strides(a.shape, len(shape)), broadcast_strides(b.shape, len(shape)))
        _BCAST[name].launch_elements(provider, out.dtype, out.size, a, b, out, out.size, *plan_args(sizes, strides))
    return out


def _unary_kernel(name):
    def kernel(ctx):
        return {"output": unary(ctx.provider, name, ctx.inputs[0])}
    return kernel


def _fold(name, output):
    """The inputs combined pairwise from the left, in place once the result has the output's shape."""
    def kernel(ctx):
        arrays = ctx.inputs
        if len(arrays) == 1:
            result = ctx.provider.empty(arrays[0].shape, arrays[0].dtype)
            ctx.provider.copy_into(result, arrays[0])
            return {output: result}
        result = binary(ctx.provider, name, arrays[0], arrays[1])
        for a in arrays[2:]:
            grows = np.broadcast_shapes(result.shape, a.shape) != result.shape
            result = binary(ctx.provider, name, result, a, out=None if grows else result)
        return {output: result}
    return kernel


for _op, _since in (("Abs", 6), ("Sign", 9), ("Log", 6), ("Exp", 6), ("Sqrt", 6), ("Erf", 9), ("Reciprocal", 6)):
    register_kernel(_op, since=_since, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(_unary_kernel(_op.lower()))
register_kernel("Max", since=8, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(_fold("max", "max"))
register_kernel("Min", since=8, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(_fold("min", "min"))


@register_kernel("Pow", since=7, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def power(ctx):
    return {"Z": binary(ctx.provider, "pow", ctx.inputs[0], ctx.inputs[1])}


@register_kernel("PRelu", since=7, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def prelu(ctx):
    return {"Y": binary(ctx.provider, "prelu", ctx.inputs[0], ctx.inputs[1])}


@register_kernel("Clip", since=6, end=10, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def clip_attributes(ctx):
    x = ctx.inputs[0]
    y = ctx.provider.empty(x.shape, x.dtype)
    _CLIP.launch_elements(ctx.provider, x.dtype, packs(x), x, y, x.size, ctx.attrs["min"], ctx.attrs["max"])
    return {"output": y}


@register_kernel("Clip", since=11, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def clip(ctx):
    """An absent bound is a null pointer: it clips nothing."""
    x, low, high = (ctx.inputs + [None, None])[:3]
    y = ctx.provider.empty(x.shape, x.dtype)
    _CLIP_BOUNDS.launch_elements(ctx.provider, x.dtype, packs(x), x, y, x.size, 0 if low is None else low,
                                 0 if high is None else high)
    return {"output": y}


@register_kernel("Scale", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
def scale(ctx):
    x = ctx.inputs[0]
    factor = float(np.asarray(ctx.inputs[1]).reshape(()))
    y = ctx.provider.empty(x.shape, x.dtype)
    _SCALE.launch_elements(ctx.provider, x.dtype, packs(x), x, y, x.size, factor, int(ctx.attrs["scale_down"]))
    return {"output": y}
