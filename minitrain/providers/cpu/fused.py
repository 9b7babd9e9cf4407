"""CPU kernels of the fused ops (minitrain/ops/fused.py): the unfused kernels' own code run in
one call, the activation applied in place, so a fused plan gives the unfused plan's bits."""
import numpy as np

from ..._ext import activation as _act
from ..._ext import broadcast as _broadcast
from ..._ext import pointwise_activation as _pa
from ..._ext import pool as _pool
from ...ops.fused import ACTIVATIONS, KERNEL_NAMES, activation_alpha, clip_bounds, max_pool_tiles
from ...ops.schema import FUSED_DOMAIN, MS_DOMAIN
from ...ops.shape_utils import split_planes
from ...registry import KernelContext, lookup, register_kernel
from ...threads import kernel_threads
from .conv import bias_grad, conv_kernel
from .elementwise import sum_to_shape, vector_layout
from .loss import as_ncd, cross_entropy, log_softmax
from .math import gemm
from .pool import global_average_pool_grad, max_pool, max_pool_grad
from .specialized import specialized
from .streaming import should_stream


def activate_in_place(ctx, y):
    """y = act(y) for the fused op's activation (Clip: min(max(y, min), max), as clip.py's)."""
    flat = y.reshape(-1)
    if ctx.attrs["activation"] == "Clip":
        low, high = clip_bounds(ctx.attrs)
        np.minimum(np.maximum(flat, low, out=flat), high, out=flat)
    else:
        _act.forward(KERNEL_NAMES[ctx.attrs["activation"]], flat, flat, activation_alpha(ctx.attrs), kernel_threads())
    return y


@register_kernel("FusedGemm", domain=MS_DOMAIN)
def fused_gemm(ctx):
    return {"Y": activate_in_place(ctx, np.ascontiguousarray(gemm(ctx)["Y"]))}


@register_kernel("FusedConv", domain=MS_DOMAIN)
def fused_conv(ctx):
    return {"Y": activate_in_place(ctx, conv_kernel(ctx)["Y"])}


def activation_gradient(ctx, dy, xy):
    """The activation's gradient dX: activation.pyx's kernel, or for an activation it lacks
    (HardSwish) the CPU kernel of its gradient op."""
    act = ctx.attrs["activation"]
    if act not in KERNEL_NAMES:
        kernel = lookup(ACTIVATIONS[act], MS_DOMAIN, 1, "cpu", ctx.dtype)[1]
        return kernel(_part(ctx, ACTIVATIONS[act], [dy, xy], ("dX",), {}))["dX"]
    dx = np.empty_like(dy)
    _act.backward(KERNEL_NAMES[act], dy.reshape(-1), xy.reshape(-1), dx.reshape(-1), activation_alpha(ctx.attrs),
                  kernel_threads(), should_stream(dy, xy, dx))
    return dx


@register_kernel("ActivationGradBias", domain=FUSED_DOMAIN)
def activation_grad_bias(ctx):
    dy, xy = ctx.inputs
    dx = activation_gradient(ctx, dy, xy)
    out = {"dX": dx}
    if ctx.wants("dB"):     # SumToShape's sum for a Gemm's (N, C), ConvGrad's for (N, C, ...)
        out["dB"] = sum_to_shape(dx, dx.shape[1:]) if dx.ndim == 2 else bias_grad(dx)
    return out


@register_kernel("ClipGrad", domain=FUSED_DOMAIN)
def clip_grad(ctx):
    """pointwise_activation.pyx's clip gradient: one pass where the unfused nodes take four."""
    dy, x, low, high = (ctx.inputs + [None, None])[:4]
    dx = np.empty(x.shape, x.dtype)
    specialized(_pa.backward, x.dtype)(
        "clip", np.ascontiguousarray(dy).reshape(-1), np.ascontiguousarray(x).reshape(-1), dx.reshape(-1),
        -np.inf if low is None else float(low.reshape(())),      # an absent bound clips nothing
        np.inf if high is None else float(high.reshape(())), kernel_threads())
    return {"dX": dx}


@register_kernel("MulGrad", domain=FUSED_DOMAIN)
def mul_grad(ctx):
    """broadcast.pyx's one pass where A has dY's shape and B is a vector broadcast over it
    (elementwise.vector_layout); elsewhere the unfused nodes' products and sums."""
    dy, a, b = ctx.inputs
    layout = vector_layout(a, b) if a.shape == dy.shape and dy.dtype == a.dtype else None
    if layout is None:
        out = {}
        if ctx.wants("dA"):
            out["dA"] = sum_to_shape(np.multiply(dy, b), a.shape)
        if ctx.wants("dB"):
            out["dB"] = sum_to_shape(np.multiply(dy, a), b.shape)
        return out
    da = np.empty(a.shape, a.dtype) if ctx.wants("dA") else None
    db = np.empty(b.shape, b.dtype) if ctx.wants("dB") else None
    specialized(_broadcast.mul_grad, dy.dtype)(
        np.ascontiguousarray(dy).reshape(-1), np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1),
        None if da is None else da.reshape(-1), None if db is None else db.reshape(-1), *layout[:3], kernel_threads())
    return {name: value for name, value in (("dA", da), ("dB", db)) if value is not None}


def _part(ctx, op_type, inputs, wanted, attrs=None, output_shapes=None):
    """The context of one of the unfused kernels that a fused kernel runs."""
    return KernelContext(op_type, ctx.node_name, inputs, ctx.attrs if attrs is None else attrs, wanted,
                         output_shapes or {}, ctx.dtype, ctx.provider)


@register_kernel("MaxPoolActivationGrad", domain=FUSED_DOMAIN, reference=True)
def max_pool_activation_grad(ctx):
    """The unfused kernels in turn, the MaxPool run again for its Indices: no faster than the
    nodes it stands for, so a reference kernel."""
    dy, x = ctx.inputs
    tiles = max_pool_tiles(ctx.attrs["kernel_shape"])
    indices = max_pool(_part(ctx, ctx.op_type, [x], ("Y", "Indices"), tiles))["Indices"]
    pooled_grad = max_pool_grad(_part(ctx, ctx.op_type, [dy, indices], ("dX",), tiles, {"dX": x.shape}))["dX"]
    return activation_grad_bias(_part(ctx, ctx.op_type, [pooled_grad, x], ctx.wanted))


@register_kernel("GlobalAveragePoolActivationGrad", domain=FUSED_DOMAIN, reference=True)
def global_average_pool_activation_grad(ctx):
    """GlobalAveragePoolGrad's kernel, then ActivationGradBias's: the pooled gradient spread
    over X's shape in memory, as unfused, so a reference kernel."""
    dy, x = ctx.inputs
    shape = np.array(x.shape, dtype=np.int64)
    spread = global_average_pool_grad(_part(ctx, "GlobalAveragePoolGrad", [dy, shape], ("dX",), {}))["dX"]
    return activation_grad_bias(_part(ctx, ctx.op_type, [spread, x], ctx.wanted))


@register_kernel("GlobalAveragePoolGradAdd", domain=FUSED_DOMAIN)
def global_average_pool_grad_add(ctx):
    """pool.pyx's one pass: A plus dY spread over A's planes."""
    dy, a = ctx.inputs
    planes, size = split_planes(a.shape)
    dx = np.empty(a.shape, dtype=a.dtype)
    if planes and size:
        _pool.global_avg_pool_grad_add(dy.reshape(planes), a.reshape(planes, size), dx.reshape(planes, size),
                                       kernel_threads())
    return {"dX": dx}


@register_kernel("SoftmaxCrossEntropyLossWithGrad", domain=FUSED_DOMAIN)
def softmax_cross_entropy_with_grad(ctx):
    """loss.py's log-probabilities, then its loss and gradient in one pass over them."""
    scores, labels, dy, weights = (ctx.inputs + [None])[:4]
    s, lab = as_ncd(scores, labels)
    out = cross_entropy(ctx, log_softmax(s), lab, weights, loss_shape=labels.shape, dy=dy)
    return {"output": out["output"], "d_logits": out["d_logits"].reshape(scores.shape)}


@register_kernel("BatchNormFold", domain=FUSED_DOMAIN)
def batch_norm_fold(ctx):
    """The inference BatchNormalization's per-channel factor and shift (normalization.py's,
    in float64) applied to the Conv's weight and bias."""
    w, scale, bias, mean, var, b = (ctx.inputs + [None])[:6]
    factor = scale.astype(np.float64) * (1.0 / np.sqrt(var.astype(np.float64) + ctx.attrs["epsilon"]))
    shift = (0.0 if b is None else b.astype(np.float64)) - mean.astype(np.float64)
    w_folded = (w.astype(np.float64) * factor.reshape((-1,) + (1,) * (w.ndim - 1))).astype(ctx.dtype)
    return {"W_folded": w_folded, "B_folded": (shift * factor + bias.astype(np.float64)).astype(ctx.dtype)}
