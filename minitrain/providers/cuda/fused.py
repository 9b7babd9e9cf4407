"""CUDA kernels of the fused ops (minitrain/ops/fused.py; cuda/fused.cu), registered as the
CPU's are (providers/cpu/fused.py):

  * FusedGemm: the cuBLAS product, then one launch adding beta * C and applying the activation
    (Gemm + Relu unfused: C's broadcast, the product, the activation);
  * FusedConv: the convolution (through the algorithm search, without bias), then one launch
    adding the bias and applying the activation;
  * ActivationGradBias: one launch for dX and dB (unfused: the gradient, then the reduction),
    each channel's elements split over blocks that add up their sums in a fixed order;
  * SoftmaxCrossEntropyLossWithGrad: one launch for the rows' losses and d_logits, one for the
    loss's reduction (unfused: four), plus the weight sum first when weights or ignore_index
    make the mean's divisor unknown to the host.
"""
import math
import weakref

import numpy as np

from ...ops.conv_geometry import geometry_for
from ...ops.fused import ACTIVATIONS, FUSED_DOMAIN, activation_alpha
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from . import loss
from .compiler import BLOCK, Kernel
from .conv import REDUCE_BLOCK, run_primitive

FLOATS = (np.float16, np.float32, np.float64)
ACTIVATION_CODES = {name: code for code, name in enumerate(ACTIVATIONS)}   # cuda/fused.cu's codes
BIAS_ACTIVATION = Kernel("fused", "bias_activation", "PPqqqqqqTiT")
ACTIVATION_GRAD_BIAS = Kernel("fused", "activation_grad_bias", "PPPPPPqqqqiT")
SPLIT_ELEMENTS = 2048       # elements of a channel per block of activation_grad_bias, at least
SCE_WITH_GRAD = {(variant, suffix): Kernel("fused", f"sce_with_grad_{variant}_{suffix}", "PPPPPdPPPqqqqiiP")
                 for variant in ("warp", "thread") for suffix in loss.LABEL_SUFFIX.values()}


def bias_activation(ctx, y, bias, beta, layout):
    """y = act(y + beta * bias[...]) in place; layout: (outer_div, outer_mod, outer_stride,
    inner_mod, inner_stride) locating element i's bias (cuda/fused.cu)."""
    BIAS_ACTIVATION.launch_elements(ctx.provider, y.dtype, y.size, y, 0 if bias is None else bias, y.size, *layout,
                                    beta, ACTIVATION_CODES[ctx.attrs["activation"]], activation_alpha(ctx.attrs))


@register_kernel("FusedGemm", domain=MS_DOMAIN, provider="cuda", dtypes=FLOATS)
def fused_gemm(ctx):
    a, b, c = (ctx.inputs + [None])[:3]
    ta, tb = bool(ctx.attrs["transA"]), bool(ctx.attrs["transB"])
    m, k = (a.shape[1], a.shape[0]) if ta else a.shape
    n = b.shape[0] if tb else b.shape[1]
    y = ctx.provider.empty((m, n), ctx.dtype)
    if y.size == 0:
        return {"Y": y}
    if k == 0:
        ctx.provider.fill_zero(y)
    else:
        ctx.provider.blas.gemm(a, b, y, ta, tb, ctx.attrs["alpha"], 0.0)
    beta = ctx.attrs["beta"]
    if c is None or beta == 0.0:
        bias_activation(ctx, y, None, 0.0, (1, 1, 0, 1, 0))
    else:
        cm, cn = (1,) * (2 - c.ndim) + tuple(c.shape)
        bias_activation(ctx, y, c, beta, (n, m, 0 if cm == 1 else cn, n, 0 if cn == 1 else 1))
    return {"Y": y}


@register_kernel("FusedConv", domain=MS_DOMAIN, provider="cuda", dtypes=FLOATS)
def fused_conv(ctx):
    x, w = ctx.inputs[0], ctx.inputs[1]
    b = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    geom = geometry_for("conv", loss._who(ctx), x.shape, w.shape, ctx.attrs)
    y = ctx.provider.empty((x.shape[0], geom.col_channels) + tuple(geom.col_spatial), x.dtype)
    run_primitive(ctx, "forward", geom, x.shape[0], (x, w, None, y))
    bias_activation(ctx, y, b, 1.0, (math.prod(geom.col_spatial), geom.col_channels, 1, 1, 0))
    return {"Y": y}


_reduction_scratch = weakref.WeakKeyDictionary()


def reduction_scratch(provider, channels, splits):
    """The partial sums (float64) and the per-channel block counters (zero between launches)
    of activation_grad_bias on `provider`, made once per (channels, splits)."""
    per_provider = _reduction_scratch.setdefault(provider, {})
    scratch = per_provider.get((channels, splits))
    if scratch is None:
        counter = provider.persistent_empty((channels,), np.uint32)
        provider.fill_zero(counter)
        scratch = per_provider[channels, splits] = (provider.persistent_empty((channels * splits,), np.float64), counter)
    return scratch


@register_kernel("ActivationGradBias", domain=FUSED_DOMAIN, provider="cuda", dtypes=FLOATS)
def activation_grad_bias(ctx):
    dy, xy = ctx.inputs
    prov = ctx.provider
    dx = prov.empty(dy.shape, dy.dtype)
    db = prov.empty((dy.shape[1],), dy.dtype)
    samples, channels = dy.shape[0], dy.shape[1]
    if dy.size == 0:
        prov.fill_zero(db)
    else:
        per_channel = dy.size // channels
        # enough blocks to fill the device, none with less than SPLIT_ELEMENTS elements
        splits = max(1, min(-(-per_channel // SPLIT_ELEMENTS), -(-4 * prov.multiprocessors // channels)))
        chunk = -(-per_channel // splits)
        partial, counter = reduction_scratch(prov, channels, splits)
        ACTIVATION_GRAD_BIAS.launch(prov, dy.dtype, (channels, splits, 1), (REDUCE_BLOCK, 1, 1), dy, xy, dx, db,
                                    partial, counter, samples, per_channel // samples, channels, chunk,
                                    ACTIVATION_CODES[ctx.attrs["activation"]], activation_alpha(ctx.attrs))
    out = {"dX": dx}
    if ctx.wants("dB"):
        out["dB"] = db
    return out


@register_kernel("SoftmaxCrossEntropyLossWithGrad", domain=FUSED_DOMAIN, provider="cuda", dtypes=FLOATS)
def softmax_cross_entropy_with_grad(ctx):
    scores, labels, dy, weights = (ctx.inputs + [None])[:4]
    prov = ctx.provider
    guard = loss.label_guard(prov)
    guard.check()
    n, c, d = loss._ncd(scores.shape)
    rows = n * d
    suffix = loss.LABEL_SUFFIX[np.dtype(labels.dtype)]
    reduction = ctx.attrs["reduction"]
    ignore, has_ignore = loss._label_args(ctx)
    weights = 0 if weights is None else weights
    d_logits = prov.empty(scores.shape, ctx.dtype)
    if reduction == "none":
        output, partial = prov.empty(labels.shape, ctx.dtype), None
    else:
        output, partial = prov.empty((), ctx.dtype), prov.empty((2, rows), np.float64)
    wsum = 0
    if rows and reduction == "mean" and (not isinstance(weights, int) or has_ignore):
        wsum = prov.empty((1,), np.float64)
        loss.KERNELS["sce_weight_sum", suffix].launch(prov, ctx.dtype, *loss.ONE_BLOCK, labels, weights, rows, c,
                                                      ignore, has_ignore, guard.flag, wsum)
    if rows:
        args = (scores, labels, weights, dy, wsum, float(rows), d_logits, output if partial is None else 0,
                0 if partial is None else partial, rows, c, d, ignore, has_ignore, loss.REDUCTIONS[reduction],
                guard.flag)
        if d == 1:     # rows are contiguous: a warp per row
            blocks = min((rows + loss.WARPS_PER_BLOCK - 1) // loss.WARPS_PER_BLOCK, prov.multiprocessors * 16)
            SCE_WITH_GRAD["warp", suffix].launch(prov, ctx.dtype, (blocks, 1, 1), (BLOCK, 1, 1), *args)
        else:          # a row's classes are D apart: a thread per row
            SCE_WITH_GRAD["thread", suffix].launch_elements(prov, ctx.dtype, rows, *args)
        guard.launched(loss._who(ctx), c, ctx.attrs.get("ignore_index"))
    if partial is not None:
        loss.REDUCE.launch(prov, ctx.dtype, *loss.ONE_BLOCK, partial, rows, int(reduction == "mean"), output)
    return {"output": output, "d_logits": d_logits}
