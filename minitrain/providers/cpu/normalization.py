"""CPU kernels of BatchNormalization and BatchNormalizationGrad (Cython passes over
(N, C, D) planes; the per-channel coefficients are small NumPy vectors)."""
import numpy as np

from ..._ext import batchnorm as _bn
from ...ops.normalization import is_training
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from ...threads import kernel_threads
from .batchnorm_types import in_data_type


def _ncd(x):
    n, c = x.shape[0], x.shape[1]
    return n, c, int(np.prod(x.shape[2:], dtype=np.int64))


@register_kernel("BatchNormalization", since=9, end=13)
@register_kernel("BatchNormalization", since=14)
@in_data_type({"running_mean": 3, "running_var": 3, "saved_mean": 3, "saved_inv_std": 3})
def batch_normalization(ctx):
    x, scale, bias, input_mean, input_var = ctx.inputs
    a = ctx.attrs
    n, c, d = _ncd(x)
    threads = kernel_threads()
    training = is_training(a, ctx.wants)
    if training:
        if n * d == 0:
            ctx.fail(f"training mode needs at least one value per channel, X has shape {x.shape}")
        mean, var = np.empty(c), np.empty(c)
        _bn.channel_stats(x.reshape(-1), n, c, d, mean, var, threads)
    else:
        mean, var = input_mean.astype(np.float64), input_var.astype(np.float64)
    inv_std = 1.0 / np.sqrt(var + a["epsilon"])
    mul = (scale * inv_std).astype(ctx.dtype)
    add = (bias - mean * scale * inv_std).astype(ctx.dtype)
    y = np.empty_like(x)
    _bn.normalize(x.reshape(-1), y.reshape(-1), n, c, d, mul, add, threads)
    out = {"Y": y, "saved_mean": mean.astype(ctx.dtype), "saved_inv_std": inv_std.astype(ctx.dtype)}
    if training:
        m = a["momentum"]
        out["running_mean"] = (m * input_mean + (1 - m) * mean).astype(ctx.dtype)
        out["running_var"] = (m * input_var + (1 - m) * var).astype(ctx.dtype)
    return out


@register_kernel("BatchNormalizationGrad", domain=MS_DOMAIN)
@in_data_type({"dscale": 2, "dbias": 2})
def batch_normalization_grad(ctx):
    dy, x, scale, mean, inv_std = ctx.inputs
    n, c, d = _ncd(x)
    threads = kernel_threads()
    training = bool(ctx.attrs["training_mode"])
    out = {}
    if training or ctx.wants("dscale") or ctx.wants("dbias"):
        dbias, dscale = np.empty(c), np.empty(c)
        _bn.grad_sums(dy.reshape(-1), x.reshape(-1), n, c, d, mean, inv_std, dbias, dscale, threads)
        out["dscale"], out["dbias"] = dscale.astype(ctx.dtype), dbias.astype(ctx.dtype)
    if ctx.wants("dX"):
        k_dy = scale.astype(np.float64) * inv_std
        if training:
            count = n * d
            k_x, k_0 = -k_dy * inv_std * dscale / count, -k_dy * dbias / count
        else:
            k_x = k_0 = np.zeros(c)
        dx = np.empty_like(x)
        _bn.grad_input(dy.reshape(-1), x.reshape(-1), dx.reshape(-1), n, c, d, mean,
                       *(k.astype(ctx.dtype) for k in (k_dy, k_x, k_0)), threads)
        out["dX"] = dx
    return {k: v for k, v in out.items() if ctx.wants(k)}
