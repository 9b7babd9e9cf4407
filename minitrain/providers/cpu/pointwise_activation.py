"""CPU kernels of the pointwise activations of ops/pointwise_activation.py and their gradient
ops (NumPy and scipy.special, in the input's float type: the constants are Python floats,
which never widen a float32 array)."""
import math

import numpy as np
from scipy.special import erf, expit

from ...ops.pointwise_activation import GELU_TANH_CUBIC, GELU_TANH_SCALE
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel

SQRT_HALF = math.sqrt(0.5)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def hard_sigmoid(x, a):
    return np.clip(a["alpha"] * x + a["beta"], 0.0, 1.0)


def hard_sigmoid_grad(dy, x, a):
    linear = a["alpha"] * x + a["beta"]
    return np.where((linear > 0) & (linear < 1), a["alpha"] * dy, 0.0)


def hard_swish(x, a):
    return x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)


def hard_swish_grad(dy, x, a):
    """PyTorch's hardswish_backward: 0 below -3, dY (X / 3 + 1/2) up to 3 included, dY above."""
    return np.where(x < -3.0, 0.0, np.where(x <= 3.0, dy * (x / 3.0 + 0.5), dy))


def softplus(x, a):
    return np.logaddexp(x, 0.0)


def softplus_grad(dy, x, a):
    return dy * expit(x)


def elu(x, a):
    return np.where(x > 0, x, a["alpha"] * np.expm1(np.minimum(x, 0.0)))


def elu_grad(dy, x, a):
    return np.where(x > 0, dy, dy * (a["alpha"] * np.exp(np.minimum(x, 0.0))))


def selu(x, a):
    return a["gamma"] * np.where(x > 0, x, a["alpha"] * np.expm1(np.minimum(x, 0.0)))


def selu_grad(dy, x, a):
    return a["gamma"] * np.where(x > 0, dy, dy * (a["alpha"] * np.exp(np.minimum(x, 0.0))))


def gelu_erf(x):
    return 0.5 * x * (1.0 + erf(x * SQRT_HALF))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(GELU_TANH_SCALE * (x + GELU_TANH_CUBIC * x * x * x)))


def gelu(x, a):
    return gelu_tanh(x) if a.get("approximate") == "tanh" else gelu_erf(x)


def gelu_grad(dy, x, a):
    """dY (Phi(X) + X phi(X)): the normal distribution's CDF and density."""
    return dy * (0.5 * (1.0 + erf(x * SQRT_HALF)) + x * (INV_SQRT_2PI * np.exp(-0.5 * x * x)))


def fast_gelu_grad(dy, x, a):
    t = np.tanh(GELU_TANH_SCALE * (x + GELU_TANH_CUBIC * x * x * x))
    slope = GELU_TANH_SCALE * (1.0 + (3.0 * GELU_TANH_CUBIC) * x * x)
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * slope)


def forward_kernel(fn):
    """Y = fn(X, attributes), in X's dtype."""
    def kernel(ctx):
        x = ctx.inputs[0]
        with np.errstate(over="ignore", invalid="ignore"):
            return {"Y": np.asarray(fn(x, ctx.attrs), dtype=x.dtype)}
    return kernel


def gradient_kernel(fn):
    """dX = fn(dY, X, attributes), in dY's dtype."""
    def kernel(ctx):
        dy, x = ctx.inputs
        with np.errstate(over="ignore", invalid="ignore"):
            return {"dX": np.asarray(fn(dy, x, ctx.attrs), dtype=dy.dtype)}
    return kernel


@register_kernel("FastGelu", domain=MS_DOMAIN)
def fast_gelu(ctx):
    x, bias = (ctx.inputs + [None])[:2]
    shifted = x if bias is None else x + bias
    with np.errstate(over="ignore", invalid="ignore"):
        return {"Y": np.asarray(gelu_tanh(shifted), dtype=x.dtype)}


for _op, _since, _forward, _backward in (("HardSigmoid", 6, hard_sigmoid, hard_sigmoid_grad),
                                         ("HardSwish", 14, hard_swish, hard_swish_grad),
                                         ("Softplus", 1, softplus, softplus_grad), ("Elu", 6, elu, elu_grad),
                                         ("Selu", 6, selu, selu_grad)):
    register_kernel(_op, since=_since)(forward_kernel(_forward))
    register_kernel(f"{_op}Grad", domain=MS_DOMAIN)(gradient_kernel(_backward))
register_kernel("Gelu", since=20)(forward_kernel(gelu))
register_kernel("Gelu", domain=MS_DOMAIN)(forward_kernel(gelu))
register_kernel("GeluGrad", domain=MS_DOMAIN)(gradient_kernel(gelu_grad))
register_kernel("FastGeluGrad", domain=MS_DOMAIN)(gradient_kernel(fast_gelu_grad))
