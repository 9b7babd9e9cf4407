"""CPU kernels of the comparisons, And and Cast (NumPy)."""
import numpy as np

from ...ops.compare import HOST_CAST_TYPES, ONNX_DTYPES
from ...registry import register_kernel


def _compare(ufunc):
    def kernel(ctx):
        return {"C": np.asarray(ufunc(ctx.inputs[0], ctx.inputs[1]))}
    return kernel


register_kernel("Equal", since=7)(_compare(np.equal))
register_kernel("Greater", since=7)(_compare(np.greater))
register_kernel("Less", since=7)(_compare(np.less))
register_kernel("GreaterOrEqual", since=12)(_compare(np.greater_equal))
register_kernel("LessOrEqual", since=12)(_compare(np.less_equal))
register_kernel("And", since=7, dtypes=(np.bool_,))(_compare(np.logical_and))


@register_kernel("Cast", since=6, dtypes=HOST_CAST_TYPES)
def cast(ctx):
    return {"output": np.asarray(ctx.inputs[0]).astype(ONNX_DTYPES[ctx.attrs["to"]])}
