"""CPU kernels of the elementwise activations and their gradients (minitrain._ext.activation)."""
import numpy as np

from ..._ext import activation as _act
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from ...threads import kernel_threads
from .streaming import should_stream


def unary_kernel(name, output="Y"):
    """A kernel computing output = f(X) elementwise; f takes the op's `alpha` when it has one."""
    def kernel(ctx):
        x = ctx.inputs[0]
        y = np.empty_like(x)
        _act.forward(name, x.reshape(-1), y.reshape(-1), ctx.attrs.get("alpha", 0.0), kernel_threads())
        return {output: y}
    return kernel


def binary_grad_kernel(name, memory_bound=True):
    """A kernel computing dX = f'(dY, X_or_Y) elementwise; a memory-bound one streams dX when
    the tensors outgrow the cache (streaming.py)."""
    def kernel(ctx):
        dy, xy = ctx.inputs[0], ctx.inputs[1]
        dx = np.empty_like(dy)
        _act.backward(name, dy.reshape(-1), xy.reshape(-1), dx.reshape(-1), ctx.attrs.get("alpha", 0.0),
                      kernel_threads(), memory_bound and should_stream(dy, xy, dx))
        return {"dX": dx}
    return kernel


register_kernel("Relu", since=6)(unary_kernel("relu"))
register_kernel("Sigmoid", since=6)(unary_kernel("sigmoid"))
register_kernel("Tanh", since=6)(unary_kernel("tanh", "output"))
register_kernel("LeakyRelu", since=6)(unary_kernel("leaky_relu"))
register_kernel("QuickGelu", domain=MS_DOMAIN)(unary_kernel("quick_gelu"))

register_kernel("ReluGrad", domain=MS_DOMAIN)(binary_grad_kernel("relu"))
register_kernel("SigmoidGrad", domain=MS_DOMAIN)(binary_grad_kernel("sigmoid"))
register_kernel("TanhGrad", domain=MS_DOMAIN)(binary_grad_kernel("tanh"))
register_kernel("LeakyReluGrad", domain=MS_DOMAIN)(binary_grad_kernel("leaky_relu"))
register_kernel("QuickGeluGrad", domain=MS_DOMAIN)(binary_grad_kernel("quick_gelu", memory_bound=False))
