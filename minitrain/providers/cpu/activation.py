"""CPU kernels of the elementwise activations and their gradients."""
import numpy as np

from ..._ext import activation as _act
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from ...threads import get_num_threads


def unary_kernel(fn):
    """A kernel computing Y = fn(X) elementwise with a Cython loop."""
    def kernel(ctx):
        x = ctx.inputs[0]
        y = np.empty_like(x)
        fn(x.reshape(-1), y.reshape(-1), get_num_threads())
        return {"Y": y}
    return kernel


def binary_grad_kernel(fn):
    """A kernel computing dX = fn(dY, X_or_Y) elementwise with a Cython loop."""
    def kernel(ctx):
        dy, xy = ctx.inputs[0], ctx.inputs[1]
        dx = np.empty_like(dy)
        fn(dy.reshape(-1), xy.reshape(-1), dx.reshape(-1), get_num_threads())
        return {"dX": dx}
    return kernel


register_kernel("Relu", since=6)(unary_kernel(_act.relu))
register_kernel("ReluGrad", domain=MS_DOMAIN)(binary_grad_kernel(_act.relu_grad))
