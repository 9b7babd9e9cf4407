"""CUDA kernels of BatchNormalization and BatchNormalizationGrad (cuda/batchnorm.cu), with the
CPU kernels' outputs and formulas (providers/cpu/normalization.py, ext/batchnorm.pyx): biased
batch variance, running stats `momentum * input + (1 - momentum) * batch`, saved_mean and
saved_inv_std = 1 / sqrt(var + epsilon), gradients from the saved statistics.

Per-channel sums run in the accumulation type (float for float16 and float32, double for
float64): a few blocks per channel reduce shares of its N * spatial elements, one thread per
channel merges them and writes the per-channel outputs and the coefficients of the
elementwise pass, which reads them from device memory: nothing is synchronised with the host.

The per-channel values (scale, B, the statistics, dscale, dbias) are all of the data's type, or
all float32 whatever the data's type (ONNX's T1 and T2: mixed precision normalises float16 or
bfloat16 data with float32 parameters and statistics).
"""
import math

import numpy as np

from ...errors import DTypeError
from ...ops.normalization import is_training
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .launch import BLOCK


def _per_channel_kernels(name, signature):
    """The kernel `name` of cuda/batchnorm.cu for per-channel values of the data's type (False)
    and for float32 ones (True)."""
    return {False: Kernel("batchnorm", name, signature), True: Kernel("batchnorm", f"{name}_float_params", signature)}


_partial_stats = Kernel("batchnorm", "bn_partial_stats", "PPqqqi")
_finalize = _per_channel_kernels("bn_finalize", "PPPPPPPPPPPqqTTi")
_normalize = Kernel("batchnorm", "bn_normalize", "PPPqqq")
_partial_grad = _per_channel_kernels("bn_partial_grad", "PPPPqqqi")
_finalize_grad = _per_channel_kernels("bn_finalize_grad", "PPPPPPqTii")
_grad_input = _per_channel_kernels("bn_grad_input", "PPPPPqqq")
FLOAT32 = np.dtype(np.float32)


def _ncd(x):
    return int(x.shape[0]), int(x.shape[1]), math.prod(int(d) for d in x.shape[2:])


def _acc(dtype):
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def _splits(provider, n, c, d):
    """Blocks per channel: enough for about four blocks per multiprocessor over all channels,
    each with at least 2048 elements."""
    return max(1, min(-(-4 * provider.multiprocessors // max(c, 1)), -(-n * d // 2048)))


def _channel_reduce(provider, kernel, dtype, n, c, d, width, *inputs):
    """Launch a per-channel partial reduction writing `width` values per block; returns
    (partials, splits)."""
    splits = _splits(provider, n, c, d)
    part = provider.empty((c * splits * width,), _acc(dtype))
    if c:
        kernel.launch(provider, dtype, (c * splits, 1, 1), (BLOCK, 1, 1), *inputs, part, n, c, d, splits)
    return part, splits


def _per_channel_type(ctx, x, inputs):
    """The element type of the per-channel inputs (name -> array): x's, or float32; DTypeError
    for any other mix, which no kernel serves."""
    dtypes = {name: np.dtype(a.dtype) for name, a in inputs.items()}
    for dtype in (x.dtype, FLOAT32):
        if all(d == dtype for d in dtypes.values()):
            return dtype
    ctx.fail(f"on CUDA, inputs {', '.join(dtypes)} must all have X's type {x.dtype} or all be float32; got "
             + ", ".join(f"{name} {d}" for name, d in dtypes.items()), DTypeError)


def _out(ctx, name, c, dtype):
    return ctx.provider.empty((c,), dtype) if ctx.wants(name) else None


def _ptr(value):
    return 0 if value is None else value


@register_kernel("BatchNormalization", since=9, end=13, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
@register_kernel("BatchNormalization", since=14, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def batch_normalization(ctx):
    x, scale, bias, input_mean, input_var = ctx.inputs
    a = ctx.attrs
    provider = ctx.provider
    n, c, d = _ncd(x)
    per_channel = _per_channel_type(ctx, x, {"scale": scale, "B": bias, "input_mean": input_mean,
                                             "input_var": input_var})
    float_params = per_channel != x.dtype
    training = is_training(a, ctx.wants)
    part, splits = None, 1
    if training:
        if n * d == 0:
            ctx.fail(f"training mode needs at least one value per channel, X has shape {x.shape}")
        part, splits = _channel_reduce(provider, _partial_stats, x.dtype, n, c, d, 3, x)
    out = {name: _out(ctx, name, c, per_channel) for name in ("saved_mean", "saved_inv_std")}
    if training:
        out.update((name, _out(ctx, name, c, per_channel)) for name in ("running_mean", "running_var"))
    coef = provider.empty((2 * c,), _acc(x.dtype))
    _finalize[float_params].launch_elements(
        provider, x.dtype, c, _ptr(part), x, scale, bias, input_mean, input_var,
        *(_ptr(out.get(k)) for k in ("saved_mean", "saved_inv_std", "running_mean", "running_var")),
        coef, d, c, a["epsilon"], a["momentum"], splits)
    y = provider.empty(x.shape, x.dtype)
    _normalize.launch_elements(provider, x.dtype, x.size, x, y, coef, x.size, c, d)
    out["Y"] = y
    return {k: v for k, v in out.items() if v is not None}


@register_kernel("BatchNormalizationGrad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def batch_normalization_grad(ctx):
    dy, x, scale, mean, inv_std = ctx.inputs
    provider = ctx.provider
    n, c, d = _ncd(x)
    per_channel = _per_channel_type(ctx, x, {"scale": scale, "mean": mean, "inv_std": inv_std})
    float_params = per_channel != x.dtype
    training = bool(ctx.attrs["training_mode"])
    part, splits = None, 1
    if (training or ctx.wants("dscale") or ctx.wants("dbias")) and n * d:
        part, splits = _channel_reduce(provider, _partial_grad[float_params], x.dtype, n, c, d, 2, dy, x, mean)
    out = {name: _out(ctx, name, c, per_channel) for name in ("dscale", "dbias")}
    coef = provider.empty((3 * c,), _acc(x.dtype)) if ctx.wants("dX") else None
    _finalize_grad[float_params].launch_elements(provider, x.dtype, c, _ptr(part), scale, inv_std,
                                                 _ptr(out["dscale"]), _ptr(out["dbias"]), _ptr(coef), c,
                                                 float(max(n * d, 1)), splits, int(training))
    if coef is not None:
        dx = provider.empty(x.shape, x.dtype)
        _grad_input[float_params].launch_elements(provider, x.dtype, x.size, dy, x, mean, coef, dx, x.size, c, d)
        out["dX"] = dx
    return {k: v for k, v in out.items() if v is not None}
