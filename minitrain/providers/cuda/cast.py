"""CUDA kernels of Cast and MixedPrecisionScale (cuda/cast.cu): one grid-stride kernel per
destination type, instantiated for every float source type and for bool; the same registrations
as providers/cpu/compare.py and providers/cpu/loss_scale.py."""
import numpy as np

from ...ops.compare import ONNX_DTYPES
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, SUFFIX, Kernel, module
from .logic import BOOL


class _CastKernel(Kernel):
    """cast_to_<dst>_<src>: the float sources as every Kernel, a bool source as <src> = b8."""

    def function(self, dtype):
        if np.dtype(dtype) != BOOL:
            return super().function(dtype)
        fn = self._functions.get(BOOL)
        if fn is None:
            fn = module(self.family).get_function(f"{self.name}_b8")
            fn.prepare(self.signature)
            self._functions[BOOL] = fn
        return fn


FLOAT_DESTINATION = dict(SUFFIX)
DESTINATION = {**FLOAT_DESTINATION, np.dtype(np.int32): "i32", np.dtype(np.int64): "i64", BOOL: "b8"}
CAST = {dtype: _CastKernel("cast", f"cast_to_{suffix}", "PPq") for dtype, suffix in DESTINATION.items()}
SCALE = {dtype: Kernel("cast", f"mp_scale_to_{suffix}", "PPPq") for dtype, suffix in FLOAT_DESTINATION.items()}


@register_kernel("Cast", since=6, provider="cuda", dtypes=CUDA_FLOAT_TYPES + (BOOL,))
def cast(ctx):
    x = ctx.inputs[0]
    to = ONNX_DTYPES[ctx.attrs["to"]]
    y = ctx.provider.empty(x.shape, to)
    CAST[to].launch_elements(ctx.provider, x.dtype, x.size, x, y, x.size)
    return {"output": y}


@register_kernel("MixedPrecisionScale", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def mixed_precision_scale(ctx):
    scale, x = ctx.inputs
    to = ONNX_DTYPES[ctx.attrs["to"]]
    y = ctx.provider.empty(x.shape, to)
    SCALE[to].launch_elements(ctx.provider, ctx.dtype, x.size, scale, x, y, x.size)
    return {"Y": y}
