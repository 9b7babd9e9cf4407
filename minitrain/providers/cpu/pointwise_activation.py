"""CPU kernels of the pointwise activations of ops/pointwise_activation.py and their gradient
ops (minitrain._ext.pointwise_activation: OpenMP chunks of plain loops, as the activations of
activation.py).  FastGelu's optional bias is added first, broadcasting (NumPy); BiasGelu's bias of
the last dim is added row by row in the kernel's one pass."""
import numpy as np

from ..._ext import pointwise_activation as _pa
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from ...threads import kernel_threads
from .specialized import specialized

# op: (kernel name, the attributes passed as the kernel's two parameters a and b)
PARAMETERS = {"HardSigmoid": ("hard_sigmoid", ("alpha", "beta")), "HardSwish": ("hard_swish", ()),
              "Softplus": ("softplus", ()), "Elu": ("elu", ("alpha",)), "Selu": ("selu", ("alpha", "gamma")),
              "Gelu": ("gelu", ()), "FastGelu": ("fast_gelu", ())}


def _parameters(attrs, names):
    values = [float(attrs[name]) for name in names]
    return values + [0.0] * (2 - len(values))


def forward(name, x, params):
    y = np.empty_like(x)
    specialized(_pa.forward, x.dtype)(name, x.reshape(-1), y.reshape(-1), *params, kernel_threads())
    return y


def forward_kernel(op):
    name, attr_names = PARAMETERS[op]

    def kernel(ctx):
        kernel_name = "fast_gelu" if op == "Gelu" and ctx.attrs.get("approximate") == "tanh" else name
        return {"Y": forward(kernel_name, ctx.inputs[0], _parameters(ctx.attrs, attr_names))}
    return kernel


def gradient_kernel(op):
    name, attr_names = PARAMETERS[op]

    def kernel(ctx):
        dy, x = ctx.inputs
        dx = np.empty_like(dy)
        specialized(_pa.backward, dy.dtype)(name, dy.reshape(-1), x.reshape(-1), dx.reshape(-1),
                                            *_parameters(ctx.attrs, attr_names), kernel_threads())
        return {"dX": dx}
    return kernel


@register_kernel("FastGelu", domain=MS_DOMAIN)
def fast_gelu(ctx):
    x, bias = (ctx.inputs + [None])[:2]
    shifted = x if bias is None else np.ascontiguousarray(x + bias)
    return {"Y": forward("fast_gelu", shifted, [0.0, 0.0])}


for _op, _since in (("HardSigmoid", 6), ("HardSwish", 14), ("Softplus", 1), ("Elu", 6), ("Selu", 6)):
    register_kernel(_op, since=_since)(forward_kernel(_op))
    register_kernel(f"{_op}Grad", domain=MS_DOMAIN)(gradient_kernel(_op))
register_kernel("Gelu", since=20)(forward_kernel("Gelu"))
register_kernel("Gelu", domain=MS_DOMAIN)(forward_kernel("Gelu"))
register_kernel("GeluGrad", domain=MS_DOMAIN)(gradient_kernel("Gelu"))
register_kernel("FastGeluGrad", domain=MS_DOMAIN)(gradient_kernel("FastGelu"))



@register_kernel("BiasGelu", domain=MS_DOMAIN)
def bias_gelu(ctx):
    x, bias = ctx.inputs
    y = np.empty_like(x)
    _pa.bias_gelu(x.reshape(-1), np.ascontiguousarray(bias), y.reshape(-1), kernel_threads())
    return {"C": y}


@register_kernel("BiasGeluGrad_dX", domain=MS_DOMAIN)
def bias_gelu_grad(ctx):
    dy, x, bias = ctx.inputs
    dx = np.empty_like(dy)
    _pa.bias_gelu_grad(dy.reshape(-1), x.reshape(-1), np.ascontiguousarray(bias), dx.reshape(-1), kernel_threads())
    return {"dX": dx}
