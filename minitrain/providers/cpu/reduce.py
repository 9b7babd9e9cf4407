"""CPU kernels of ReduceSum, ReduceMean and ReduceMax (NumPy): axes from the attribute (the
older opsets) or the input (ReduceSum 13+, the others 18+)."""
import math

import numpy as np

from ...ops.reduce import reduced_axes, reduced_shape
from ...registry import register_kernel


def _sum(x, axes, dtype):
    return np.sum(x, axis=axes, keepdims=True, dtype=dtype)


def _mean(x, axes, dtype):
    """The sum over the count; NaN over an empty set (NumPy's mean would also warn)."""
    count = dtype.type(math.prod(x.shape[a] for a in axes))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(x, axis=axes, keepdims=True, dtype=dtype) / count


def _max(x, axes, dtype):
    """The largest value; minus infinity over an empty set, as ONNX defines it."""
    return np.max(x, axis=axes, keepdims=True, initial=-np.inf).astype(dtype, copy=False)


def _reduce(ctx, reduction, axes, noop_with_empty_axes):
    x = ctx.inputs[0]
    axes = reduced_axes(ctx.fail, x.ndim, axes, noop_with_empty_axes)
    if axes is None:
        return {"reduced": x}
    result = reduction(x, axes, ctx.dtype)
    return {"reduced": np.asarray(result).reshape(reduced_shape(x.shape, axes, ctx.attrs["keepdims"]))}


def _register(op_type, reduction, attribute_end, input_since):
    @register_kernel(op_type, since=1, end=attribute_end)
    def attribute_axes(ctx):
        return _reduce(ctx, reduction, ctx.attrs["axes"], 0)

    @register_kernel(op_type, since=input_since, host_inputs=(1,))
    def input_axes(ctx):
        axes = ctx.inputs[1] if len(ctx.inputs) > 1 else None
        return _reduce(ctx, reduction, None if axes is None else [int(a) for a in axes.reshape(-1)],
                       ctx.attrs["noop_with_empty_axes"])


_register("ReduceSum", _sum, 12, 13)
_register("ReduceMean", _mean, 17, 18)
_register("ReduceMax", _max, 17, 18)
