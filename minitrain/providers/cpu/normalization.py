"""CPU kernels of BatchNormalization, BatchNormalizationGrad and the fused
BatchNormActivationGrad: one Cython call per node (ext/batchnorm.pyx), which also writes the
per-channel outputs."""
import math

import numpy as np

from ..._ext import batchnorm as _bn
from ...ops.fused import clip_bounds
from ...ops.normalization import is_training
from ...ops.schema import FUSED_DOMAIN, MS_DOMAIN
from ...registry import register_kernel
from ...threads import kernel_threads
from .batchnorm_types import in_data_type


def _ncd(x):
    return x.shape[0], x.shape[1], math.prod(x.shape[2:])


@register_kernel("BatchNormalization", since=9, end=13)
@register_kernel("BatchNormalization", since=14)
@in_data_type({"running_mean": 3, "running_var": 3, "saved_mean": 3, "saved_inv_std": 3})
def batch_normalization(ctx):
    x, scale, bias, input_mean, input_var = ctx.inputs
    a = ctx.attrs
    n, c, d = _ncd(x)
    training = is_training(a, ctx.wants)
    if training and n * d == 0:
        ctx.fail(f"training mode needs at least one value per channel, X has shape {x.shape}")
    y = np.empty_like(x)
    saved_mean, saved_inv_std, running_mean, running_var = np.empty((4, c), ctx.dtype)     # one allocation
    _bn.forward(x.reshape(-1), y.reshape(-1), n, c, d, scale, bias, input_mean, input_var, a["epsilon"],
                a["momentum"], training, saved_mean, saved_inv_std, running_mean, running_var, kernel_threads())
    out = {"Y": y, "saved_mean": saved_mean, "saved_inv_std": saved_inv_std}
    if training:
        out["running_mean"], out["running_var"] = running_mean, running_var
    return out


def _gradient(ctx, dy, x, scale, mean, inv_std, activation=None, a=None, bounds=(-math.inf, math.inf)):
    """BatchNormalizationGrad's outputs that ctx wants (see _bn.backward for activation, a and
    Clip's bounds)."""
    n, c, d = _ncd(x)
    sums = ctx.wants("dscale") or ctx.wants("dbias")
    dx = np.empty_like(x) if ctx.wants("dX") else None
    dscale, dbias = np.empty((2, c), ctx.dtype) if sums else (None, None)
    _bn.backward(dy.reshape(-1), x.reshape(-1), None if dx is None else dx.reshape(-1), n, c, d, scale, mean,
                 inv_std, bool(ctx.attrs["training_mode"]), dscale, dbias, kernel_threads(), activation,
                 None if a is None else a.reshape(-1), *bounds)
    out = {"dX": dx, "dscale": dscale, "dbias": dbias}
    return {k: v for k, v in out.items() if ctx.wants(k)}


@register_kernel("BatchNormalizationGrad", domain=MS_DOMAIN)
@in_data_type({"dscale": 2, "dbias": 2})
def batch_normalization_grad(ctx):
    return _gradient(ctx, *ctx.inputs)


@register_kernel("BatchNormActivationGrad", domain=FUSED_DOMAIN)
@in_data_type({"dscale": 3, "dbias": 3})
def batch_norm_activation_grad(ctx):
    """BatchNormalizationGrad of the activation's gradient, made a block of channels at a time
    inside the kernel (ext/batchnorm.h)."""
    dy, a, x, scale, mean, inv_std = ctx.inputs
    act = ctx.attrs["activation"]
    bounds = clip_bounds(ctx.attrs) if act == "Clip" else (-math.inf, math.inf)
    return _gradient(ctx, dy, x, scale, mean, inv_std, act, a, bounds)
