"""CPU kernels of Softmax/LogSoftmax and their gradients, in both ONNX forms."""
import numpy as np

from ..._ext import softmax as _sm
from ...ops.schema import MS_DOMAIN
from ...ops.softmax import axis_layout
from ...registry import register_kernel
from ...threads import kernel_threads
from .streaming import should_stream


def _forward(log_softmax, coerce_2d):
    def kernel(ctx):
        x = ctx.inputs[0]
        y = np.empty_like(x)
        if x.size:
            outer, n, inner = axis_layout(x.shape, ctx.attrs["axis"], coerce_2d)
            _sm.softmax(x.reshape(-1), y.reshape(-1), outer, n, inner, log_softmax, kernel_threads())
        return {"output": y}
    return kernel


def _backward(log_softmax, coerce_2d):
    """Both gradients stream dX when the tensors outgrow the cache (streaming.py); LogSoftmax's
    keeps a row's exps from its first pass, which leaves a last pass as memory bound as
    Softmax's (ext/softmax.pyx)."""
    def kernel(ctx):
        dy, y = ctx.inputs[0], ctx.inputs[1]
        dx = np.empty_like(dy)
        if dy.size:
            outer, n, inner = axis_layout(dy.shape, ctx.attrs["axis"], coerce_2d)
            _sm.softmax_grad(dy.reshape(-1), y.reshape(-1), dx.reshape(-1), outer, n, inner,
                             log_softmax, kernel_threads(), should_stream(dy, y, dx))
        return {"dX": dx}
    return kernel


for _op, _log in (("Softmax", False), ("LogSoftmax", True)):
    register_kernel(_op, since=1, end=12)(_forward(_log, coerce_2d=True))
    register_kernel(_op, since=13)(_forward(_log, coerce_2d=False))
    register_kernel(f"{_op}Grad", domain=MS_DOMAIN)(_backward(_log, coerce_2d=True))
    register_kernel(f"{_op}Grad_13", domain=MS_DOMAIN)(_backward(_log, coerce_2d=False))
