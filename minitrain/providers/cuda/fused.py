"""CUDA kernels of the fused ops (minitrain/ops/fused.py; cuda/fused.cu), registered as the
CPU's are (providers/cpu/fused.py):

  * FusedGemm: the cuBLAS product, then one launch adding beta * C and applying the activation
    (Gemm + Relu unfused: C's broadcast, the product, the activation);
  * FusedConv: the convolution through the algorithm search with the bias and the activation
    as its epilogue (conv/epilogue.py: in the kernel where the algorithm fuses it, else one
    launch after it; Clip's bounds among the activation's parameters);
  * ActivationGradBias: one launch for dX and dB (unfused: the gradient, then the reduction;
    HardSwishGrad's formula shared with its own kernel through cuda/hard_swish.cuh),
    each channel's elements split over blocks that add up their sums in a fixed order;
  * MaxPoolActivationGrad: the same split of dB's sums, a thread per pooling window (per
    16-byte pack of X, several windows, for 1-D windows of two): it finds the window's maximum
    again in X, then writes the window's dX through the activation's gradient (dY at the
    maximum, 0 elsewhere), so the forward MaxPool writes no Indices and no dX of MaxPoolGrad
    goes through memory;
  * GlobalAveragePoolActivationGrad: ActivationGradBias's launch reading one pooled gradient
    per plane instead of GlobalAveragePoolGrad's (or AveragePoolGrad's) dX spread in memory;
  * ClipGrad: one launch over dY and X (cuda/clip_grad.cu; unfused: Less, Where, Greater,
    Where), the bounds read on the device;
  * BatchNormFold: one launch for the folded weight and bias (unfused: BatchNormalization's
    pass over the Conv's output);
  * SoftmaxCrossEntropyLossWithGrad: one launch for the rows' losses and d_logits, one for the
    loss's reduction (unfused: four), plus the weight sum first when weights or ignore_index
    make the mean's divisor unknown to the host.
"""
import numpy as np

from ...ops.conv_geometry import geometry_for
from ...ops.fused import ACTIVATIONS, activation_alpha, clip_bounds, max_pool_tiles
from ...ops.schema import FUSED_DOMAIN, MS_DOMAIN
from ...registry import register_kernel
from ..plan_cache import cached_plan
from . import loss, pool
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .conv.epilogue import BIAS_ACTIVATION
from .conv.kernels import run_primitive
from .elementwise import packs
from .launch import BLOCK, WARPS_PER_BLOCK, grid_stride_blocks

ACTIVATION_CODES = {name: code for code, name in enumerate(ACTIVATIONS)}   # cuda/fused.cu's codes
ACTIVATION_GRAD_BIAS = Kernel("fused", "activation_grad_bias", "PPPPPPqiqiT")
GLOBAL_AVERAGE_POOL_ACTIVATION_GRAD_BIAS = Kernel("fused", "global_average_pool_activation_grad_bias", "PPPPPPqiqiT")
MAX_POOL_ACTIVATION_GRAD_BIAS = {    # by the count of spatial axes
    rank: Kernel("fused", f"max_pool_activation_grad_bias_r{rank}", "PPPPPPqqiT" + pool.GEOM) for rank in (1, 2, 3)}
BATCH_NORM_FOLD = Kernel("fused", "batch_norm_fold", "PPPPPPPPqqqd")
CLIP_GRAD = Kernel("clip_grad", "clip_grad", "PPPqPP")
SPLIT_ELEMENTS = 2048       # items (elements, windows) of a channel per block of the bias-gradient kernels, at least
BLOCKS_PER_MULTIPROCESSOR = 8   # of those kernels, when the channels have items enough
SCE_WITH_GRAD = {(variant, suffix): Kernel("fused", f"sce_with_grad_{variant}_{suffix}", "PPPPPdPPPqqqqiiP")
                 for variant in ("warp", "thread") for suffix in loss.LABEL_SUFFIX.values()}


def activation_parameters(attrs):
    """The activation's two parameters in cuda/fused.cu: Clip's bounds, or (alpha, 0)."""
    return clip_bounds(attrs) if attrs["activation"] == "Clip" else (activation_alpha(attrs), 0.0)


def bias_activation(ctx, y, bias, beta, layout):
    """y = act(y + beta * bias[...]) in place; layout: (outer_div, outer_mod, outer_stride,
    inner_mod, inner_stride) locating element i's bias (cuda/fused.cu)."""
    BIAS_ACTIVATION.launch_elements(ctx.provider, y.dtype, y.size, y, 0 if bias is None else bias, y.size, *layout,
                                    beta, ACTIVATION_CODES[ctx.attrs["activation"]], *activation_parameters(ctx.attrs))


@register_kernel("FusedGemm", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
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


@register_kernel("FusedConv", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def fused_conv(ctx):
    x, w = ctx.inputs[0], ctx.inputs[1]
    b = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    geom = geometry_for("conv", ctx.who, x.shape, w.shape, ctx.attrs)
    y = ctx.provider.empty((x.shape[0], geom.col_channels) + tuple(geom.col_spatial), x.dtype)
    activation = (ACTIVATION_CODES[ctx.attrs["activation"]], *activation_parameters(ctx.attrs))
    run_primitive(ctx, "forward", geom, x.shape[0], (x, w, b, y), activation=activation)
    return {"Y": y}


def reduction_scratch(provider, channels, splits):
    """The partial sums (float64) and the per-channel block counters (zero between launches)
    of activation_grad_bias on `provider`, made once per (channels, splits)."""
    def make():
        counter = provider.persistent_empty((channels,), np.uint32)
        provider.fill_zero(counter)
        return provider.persistent_empty((channels * splits,), np.float64), counter
    return provider.cache.get(("activation_grad_bias scratch", channels, splits), make)


def channel_split(ctx, channels, items):
    """(grid, partial sums, counters) for a kernel whose block (ch, s) takes share s of channel
    ch's `items` and adds up their bias gradient: enough blocks to fill the device, none with
    less than SPLIT_ELEMENTS items."""
    prov = ctx.provider
    splits = max(1, min(-(-items // SPLIT_ELEMENTS), -(-BLOCKS_PER_MULTIPROCESSOR * prov.multiprocessors // channels)))
    return (channels, splits, 1), *reduction_scratch(prov, channels, splits)


def gradient_outputs(ctx, dx, db):
    return {"dX": dx, "dB": db} if ctx.wants("dB") else {"dX": dx}


def plane_gradient(ctx, kernel, dy, v, name):
    """dX and dB of `kernel` (activation_grad_bias or its global-pool variant) over v's
    (samples, channels, plane); `name` is the input whose plane is checked against int32."""
    prov = ctx.provider
    dx, db = prov.empty(v.shape, v.dtype), prov.empty((v.shape[1],), v.dtype)
    if v.size == 0:
        prov.fill_zero(db)
        return gradient_outputs(ctx, dx, db)
    samples, channels = v.shape[0], v.shape[1]
    plane = v.size // (samples * channels)
    if plane > np.iinfo(np.int32).max:
        ctx.fail(f"input {name!r} {tuple(v.shape)} has {plane} elements per (sample, channel); at most 2**31 - 1 here")
    grid, partial, counter = channel_split(ctx, channels, samples * plane)
    kernel.launch(prov, v.dtype, grid, (BLOCK, 1, 1), dy, v, dx, db, partial, counter, samples, plane, channels,
                  ACTIVATION_CODES[ctx.attrs["activation"]], activation_alpha(ctx.attrs))
    return gradient_outputs(ctx, dx, db)


@register_kernel("ActivationGradBias", domain=FUSED_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def activation_grad_bias(ctx):
    dy, v = ctx.inputs
    return plane_gradient(ctx, ACTIVATION_GRAD_BIAS, dy, v, "dY")


@register_kernel("GlobalAveragePoolActivationGrad", domain=FUSED_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def global_average_pool_activation_grad(ctx):
    dy, x = ctx.inputs
    return plane_gradient(ctx, GLOBAL_AVERAGE_POOL_ACTIVATION_GRAD_BIAS, dy, x, "X")


@register_kernel("MaxPoolActivationGrad", domain=FUSED_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def max_pool_activation_grad(ctx):
    dy, x = ctx.inputs
    prov = ctx.provider

    def build():
        dims = pool.pool_dims(ctx, x.shape, attrs=max_pool_tiles(ctx.attrs["kernel_shape"]))
        covered = all(g.out * g.kernel == g.size for g in dims)
        return tuple(x.shape[:2]) + tuple(g.out for g in dims[5 - x.ndim:]), pool.geom_fields(dims), covered
    pooled, geom, covered = cached_plan(ctx, "MaxPoolActivationGrad", x.shape, build)
    if dy.shape != pooled:
        ctx.fail(f"input 'dY' has shape {dy.shape}; input 'X' {x.shape} pooled by kernel_shape tiles is {pooled}")
    dx, db = prov.empty(x.shape, x.dtype), prov.empty((x.shape[1],), x.dtype)
    if dy.size == 0:
        prov.fill_zero(db)
        return gradient_outputs(ctx, dx, db)
    if not covered:
        prov.fill_zero(dx)
    samples, channels = x.shape[0], x.shape[1]
    grid, partial, counter = channel_split(ctx, channels, dy.size // channels)
    MAX_POOL_ACTIVATION_GRAD_BIAS[x.ndim - 2].launch(
        prov, x.dtype, grid, (BLOCK, 1, 1), dy, x, dx, db, partial, counter, samples, channels,
        ACTIVATION_CODES[ctx.attrs["activation"]], activation_alpha(ctx.attrs), *geom)
    return gradient_outputs(ctx, dx, db)


@register_kernel("ClipGrad", domain=FUSED_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def clip_grad(ctx):
    """An absent bound is a null pointer: it clips nothing."""
    dy, x, low, high = (ctx.inputs + [None, None])[:4]
    dx = ctx.provider.empty(x.shape, x.dtype)
    CLIP_GRAD.launch_elements(ctx.provider, x.dtype, packs(x), dy, x, dx, x.size, 0 if low is None else low,
                              0 if high is None else high)
    return {"dX": dx}


@register_kernel("BatchNormFold", domain=FUSED_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def batch_norm_fold(ctx):
    w, scale, bias, mean, var, b = (ctx.inputs + [None])[:6]
    prov = ctx.provider
    w_folded, b_folded = prov.empty(w.shape, w.dtype), prov.empty((w.shape[0],), w.dtype)
    channels = w.shape[0]
    if channels:
        BATCH_NORM_FOLD.launch_elements(prov, w.dtype, max(w.size, channels), w, scale, bias, mean, var,
                                        0 if b is None else b, w_folded, b_folded, w.size, w.size // channels,
                                        channels, ctx.attrs["epsilon"])
    return {"W_folded": w_folded, "B_folded": b_folded}


@register_kernel("SoftmaxCrossEntropyLossWithGrad", domain=FUSED_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
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
        wsum = loss.weight_sum(prov, ctx.dtype, labels, weights, rows, c, ignore, has_ignore, guard.flag)
    if rows:
        args = (scores, labels, weights, dy, wsum, float(rows), d_logits, output if partial is None else 0,
                0 if partial is None else partial, rows, c, d, ignore, has_ignore, loss.REDUCTIONS[reduction],
                guard.flag)
        if d == 1:     # rows are contiguous: a warp per row
            blocks = grid_stride_blocks(prov, rows, WARPS_PER_BLOCK)
            SCE_WITH_GRAD["warp", suffix].launch(prov, ctx.dtype, (blocks, 1, 1), (BLOCK, 1, 1), *args)
        else:          # a row's classes are D apart: a thread per row
            SCE_WITH_GRAD["thread", suffix].launch_elements(prov, ctx.dtype, rows, *args)
        guard.launched(ctx.who, c, ctx.attrs.get("ignore_index"))
    if partial is not None:
        loss.reduce_rows(prov, ctx.dtype, partial, rows, reduction == "mean", output)
    return {"output": output, "d_logits": d_logits}
