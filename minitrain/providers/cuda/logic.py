"""CUDA kernels of the comparisons, And and Where (cuda/logic.cu), so that the masks of
the gradients (Clip's, ReduceMax's, Max/Min's, PRelu's) stay on the device.  Broadcasting is
planned here as for Add (elementwise.py); each kernel walks the plan."""
import numpy as np

from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .elementwise import broadcast_strides
from .layout import collapse, plan_args, plan_signature

BOOL = np.dtype(np.bool_)
_COMPARE = {op: Kernel("logic", name, "PPPq" + plan_signature(2)) for op, name in (
    ("Equal", "equal"), ("Less", "less"), ("Greater", "greater"), ("LessOrEqual", "less_equal"),
    ("GreaterOrEqual", "greater_equal"))}
_AND = Kernel("logic", "logical_and", "PPPq" + plan_signature(2))
_WHERE = Kernel("logic", "where", "PPPPq" + plan_signature(3))


def strided(provider, kernel, dtype, out_dtype, operands):
    """A new array of the operands' broadcast shape, filled by `kernel` walking their plan
    (launched for element type `dtype`)."""
    shape = np.broadcast_shapes(*(a.shape for a in operands))
    out = provider.empty(shape, out_dtype)
    if out.size:
        sizes, strides = collapse(shape, *(broadcast_strides(a.shape, len(shape)) for a in operands))
        kernel.launch_elements(provider, dtype, out.size, *operands, out, out.size, *plan_args(sizes, strides))
    return out


def _comparison(op):
    def kernel(ctx):
        a, b = ctx.inputs
        return {"C": strided(ctx.provider, _COMPARE[op], a.dtype, BOOL, [a, b])}
    return kernel


for _op, _since in (("Equal", 7), ("Less", 7), ("Greater", 7), ("LessOrEqual", 12), ("GreaterOrEqual", 12)):
    register_kernel(_op, since=_since, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(_comparison(_op))


@register_kernel("And", since=7, provider="cuda", dtypes=(np.bool_,))
def logical_and(ctx):
    return {"C": strided(ctx.provider, _AND, np.float32, BOOL, list(ctx.inputs))}


@register_kernel("Where", since=9, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def where(ctx):
    condition, x, y = ctx.inputs
    return {"Y": strided(ctx.provider, _WHERE, x.dtype, x.dtype, [condition, x, y])}
