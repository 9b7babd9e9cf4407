"""CPU kernels of Log, Exp, Sqrt, Abs, Sign, Pow, Reciprocal (NumPy ufuncs) and Erf
(minitrain._ext.pointwise_activation's erf loop); 0-d inputs give 0-d arrays."""
import numpy as np

from ..._ext import pointwise_activation as _pa
from ...registry import register_kernel
from ...threads import kernel_threads


def _unary(ufunc):
    def kernel(ctx):
        with np.errstate(divide="ignore", invalid="ignore"):
            return {"output": np.asarray(ufunc(ctx.inputs[0]))}
    return kernel


register_kernel("Log", since=6)(_unary(np.log))
register_kernel("Exp", since=6)(_unary(np.exp))
register_kernel("Sqrt", since=6)(_unary(np.sqrt))
register_kernel("Abs", since=6)(_unary(np.abs))
register_kernel("Sign", since=9)(_unary(np.sign))
register_kernel("Reciprocal", since=6)(_unary(np.reciprocal))


@register_kernel("Pow", since=7)
def power(ctx):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return {"Z": np.asarray(np.power(ctx.inputs[0], ctx.inputs[1]))}


@register_kernel("Erf", since=9)
def erf(ctx):
    x = ctx.inputs[0]
    y = np.empty(x.shape, x.dtype)
    _pa.forward("erf", np.ascontiguousarray(x).reshape(-1), y.reshape(-1), 0.0, 0.0, kernel_threads())
    return {"output": y}
