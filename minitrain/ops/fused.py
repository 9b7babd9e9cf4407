"""Fused ops: what the fusion pass (minitrain/fusion/) writes in place of several nodes.

ONNX Runtime's com.microsoft ops where it has one, with its names and attributes:

    FusedGemm(A, B, C?)   Y = act(alpha op(A) op(B) + beta C); activation, activation_alpha
    FusedConv(X, W, B?)   Y = act(Conv(X, W, B)); activation, activation_params

and ops of minitrain's own domain (FUSED_DOMAIN) where ONNX Runtime has none:

    ActivationGradBias(dY, X_or_Y) -> dX, dB
        dX = the activation's gradient (ReluGrad, SigmoidGrad, ...: what it reads is that op's
        second input), dB = dX summed over every axis but axis 1: the bias gradient of the
        Gemm or Conv that the activation follows, in the same pass.
    MaxPoolActivationGrad(dY, X) -> dX, dB
        ActivationGradBias of MaxPoolGrad's dX, for a MaxPool whose windows tile its input X
        (kernel_shape = strides, no padding or dilation, floor rounding): the gradient reads X
        (the activation's output that the MaxPool pooled), and each window's maximum is found
        again in X, as MaxPool found it, instead of read from Indices.
    GlobalAveragePoolActivationGrad(dY, X) -> dX, dB
        ActivationGradBias of a global average pool's gradient (GlobalAveragePoolGrad, or
        AveragePoolGrad whose one window is the whole plane): dY (N, C, 1, ...) is the pooled
        gradient, and each element of plane (n, c) takes dY[n, c] / (X's plane size) as its
        incoming gradient, never written out as a tensor of X's shape.
    GlobalAveragePoolGradAdd(dY, A) -> dX
        A + GlobalAveragePoolGrad(dY, shape of A): the gradient of a tensor that a global average
        pool and another node read (a squeeze-excitation's input), the pooled gradient dY
        (N, C, 1, ...) spread over A's planes and added in one pass, each term rounded as
        GlobalAveragePoolGrad and Sum round it.
    ClipGrad(dY, X, min?, max?) -> dX
        Clip's gradient (ops/clip.py's Less, Greater and Where nodes) in one pass: dX = 0 where
        X < min or X > max, else dY; a NaN X passes dY (it fails both comparisons) and an absent
        bound clips nothing.
    MulGrad(dY, A, B) -> dA?, dB?
        Mul's gradient (ops/elementwise.py's Mul, Identity and SumToShape nodes) in one node:
        dA = dY B summed to A's shape, dB = dY A summed to B's shape, each product rounded
        as Mul rounds it (the sums may add in another order).  The CPU kernel takes the
        squeeze-excitation form, A of dY's shape times a vector B broadcast over it, in one
        pass over dY and A.
    BatchNormActivationGrad(dY, A, X, scale, mean, inv_std) -> dX, dscale, dbias
        BatchNormalizationGrad of the gradient of an activation (Relu, HardSwish, or Clip with its
        bounds in activation_params = [min, max]) that follows the BatchNormalization: dY is the
        gradient of the activation's output and A its input (what ReluGrad, HardSwishGrad or
        ClipGrad reads), the rest and the attributes are BatchNormalizationGrad's; the
        activation's gradient is made inside the kernel and never written out.
    SoftmaxCrossEntropyLossWithGrad(scores, labels, dY, weights?) -> output, d_logits
        SoftmaxCrossEntropyLoss's output and SoftmaxCrossEntropyLossGrad's d_logits for the seed
        dY, in one pass over the scores (no log_prob kept between them).
    BatchNormFold(W, scale, bias, mean, var, B?) -> W_folded, B_folded; epsilon
        An inference BatchNormalization folded into the Conv before it: with m = scale /
        sqrt(var + epsilon) per output channel, W_folded = W m (along axis 0) and B_folded =
        (B - mean) m + bias (B absent: 0), so that Conv(X, W_folded, B_folded) is
        BatchNormalization(Conv(X, W, B)) up to rounding.

Activations: Relu, Sigmoid, Tanh and LeakyRelu (alpha from activation_alpha, or
activation_params[0] on FusedConv, as in ONNX Runtime); FusedConv also Clip, its bounds in
activation_params = [min, max] as in ONNX Runtime; the gradient ops also HardSwish (their
second input is then X, as HardSwishGrad's).
"""
from .activation import LEAKY_RELU_ALPHA, same_as_inputs
from .conv import CONV_ATTRS, _forward_inference
from .loss import LABEL_TYPES, SCE_ATTRS, check_class_weights, check_sce
from .math import GEMM_ATTRS, broadcasts_to, infer_gemm
from .normalization import BN_ATTRS, check_channels
from .pool import check_pool_input
from .pool_geometry import output_spatial
from .schema import FUSED_DOMAIN, MS_DOMAIN, REQUIRED, Attr, Input, schema

# activation -> its gradient op (com.microsoft), which the CPU and CUDA kernels name by the
# activation's lower-case name; None where the fused gradient ops do not take it.  The order
# numbers them for cuda/fused.cu.
ACTIVATIONS = {"Relu": "ReluGrad", "Sigmoid": "SigmoidGrad", "Tanh": "TanhGrad", "LeakyRelu": "LeakyReluGrad",
               "Clip": None, "HardSwish": "HardSwishGrad"}
KERNEL_NAMES = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "LeakyRelu": "leaky_relu"}
GEMM_ACTIVATIONS = ("Relu", "Sigmoid", "Tanh", "LeakyRelu")     # FusedGemm's
CONV_ACTIVATIONS = GEMM_ACTIVATIONS + ("Clip",)                  # FusedConv's
GRADIENT_ACTIVATIONS = tuple(act for act, grad in ACTIVATIONS.items() if grad)   # the fused gradient ops'
LEAKY_DEFAULT = LEAKY_RELU_ALPHA

ACTIVATION_ATTRS = {"activation": Attr("string", REQUIRED), "activation_alpha": Attr("float", LEAKY_DEFAULT)}


def check_activation(ctx, allowed):
    """The activation attribute names one of `allowed`; Clip's activation_params hold [min, max]."""
    act = ctx.attrs["activation"]
    if act not in allowed:
        ctx.attr_fail("activation", f"is not supported; use one of {sorted(allowed)}")
    if act == "Clip" and len(ctx.attrs.get("activation_params") or []) != 2:
        ctx.attr_fail("activation_params", "must hold Clip's two bounds [min, max]")


def clip_bounds(attrs):
    """(min, max) of a fused Clip activation, from a fused op's resolved attributes."""
    low, high = attrs["activation_params"]
    return float(low), float(high)


def activation_alpha(attrs):
    """The activation's alpha (LeakyRelu's slope) from a fused op's resolved attributes."""
    params = attrs.get("activation_params")
    if params:
        return float(params[0])
    return float(attrs.get("activation_alpha", LEAKY_DEFAULT))


@schema("FusedGemm", domain=MS_DOMAIN, inputs=["A", "B", Input("C", optional=True)],
        attrs={**GEMM_ATTRS, **ACTIVATION_ATTRS, "activation_beta": Attr("float"), "activation_gamma": Attr("float")})
def infer_fused_gemm(ctx):
    """Gemm's output, the activation applied."""
    check_activation(ctx, GEMM_ACTIVATIONS)
    return infer_gemm(ctx)


_conv_inference = _forward_inference(False)


@schema("FusedConv", domain=MS_DOMAIN, inputs=["X", "W", Input("B", optional=True)],
        attrs={**CONV_ATTRS, "activation": Attr("string", REQUIRED), "activation_params": Attr("floats")})
def infer_fused_conv(ctx):
    """Conv's output, the activation applied."""
    check_activation(ctx, CONV_ACTIVATIONS)
    return _conv_inference(ctx)


@schema("ActivationGradBias", domain=FUSED_DOMAIN, inputs=["dY", "X"], outputs=["dX", "dB"],
        attrs=ACTIVATION_ATTRS, optional_outputs=("dB",))
def infer_activation_grad_bias(ctx):
    """dX like dY; dB (C,), C = dY's axis 1."""
    check_activation(ctx, GRADIENT_ACTIVATIONS)
    ctx.require_rank(0, range(2, 9), "dY")
    dx = same_as_inputs(ctx)[0]
    shape = ctx.shape(0)
    return [dx, ctx.out(None if shape is None else (shape[1],))]


@schema("GlobalAveragePoolGradAdd", domain=FUSED_DOMAIN, inputs=["dY", "A"], outputs=["dX"])
def infer_global_average_pool_grad_add(ctx):
    """dX like A; dY is A globally pooled: (N, C, 1, ...)."""
    shape = check_pool_input(ctx, 1, "A")
    if shape is None:
        return [ctx.out(None)]
    for i, d in enumerate(shape[2:]):
        if isinstance(d, int) and d < 1:
            ctx.fail(f"input 'A' {tuple(shape)} has an empty spatial axis {i}")
    ctx.require_shape(0, tuple(shape[:2]) + (1,) * (len(shape) - 2), "input 'A' globally pooled")
    return [ctx.out(shape)]


def max_pool_tiles(kernel_shape):
    """MaxPool's attributes for windows that tile the input: strides = kernel_shape."""
    return {"kernel_shape": list(kernel_shape), "strides": list(kernel_shape)}


@schema("MaxPoolActivationGrad", domain=FUSED_DOMAIN, inputs=["dY", "X"], outputs=["dX", "dB"],
        attrs={"kernel_shape": Attr("ints", REQUIRED), **ACTIVATION_ATTRS}, optional_outputs=("dB",))
def infer_max_pool_activation_grad(ctx):
    """dX like X; dB (C,); dY is X pooled by the kernel_shape tiles."""
    check_activation(ctx, GRADIENT_ACTIVATIONS)
    shape = check_pool_input(ctx, 1, "X")
    if shape is None:
        return [ctx.out(None), ctx.out(None)]
    if len(ctx.attrs["kernel_shape"]) != len(shape) - 2:
        ctx.attr_fail("kernel_shape", f"must have one entry per spatial axis of input 'X' {tuple(shape)}")
    if all(isinstance(d, int) for d in shape[2:]):
        tiles = output_spatial(max_pool_tiles(ctx.attrs["kernel_shape"]), shape[2:],
                               lambda message, error: ctx.fail(message, error), "input 'X'")
        ctx.require_shape(0, tuple(shape[:2]) + tuple(tiles), "input 'X' pooled by kernel_shape tiles")
    return [ctx.out(shape), ctx.out((shape[1],))]


@schema("GlobalAveragePoolActivationGrad", domain=FUSED_DOMAIN, inputs=["dY", "X"], outputs=["dX", "dB"],
        attrs=ACTIVATION_ATTRS, optional_outputs=("dB",))
def infer_global_average_pool_activation_grad(ctx):
    """dX like X; dB (C,); dY is X globally pooled: (N, C, 1, ...)."""
    check_activation(ctx, GRADIENT_ACTIVATIONS)
    shape = check_pool_input(ctx, 1, "X")
    if shape is None:
        return [ctx.out(None), ctx.out(None)]
    for i, d in enumerate(shape[2:]):
        if isinstance(d, int) and d < 1:
            ctx.fail(f"input 'X' {tuple(shape)} has an empty spatial axis {i}")
    ctx.require_shape(0, tuple(shape[:2]) + (1,) * (len(shape) - 2), "input 'X' globally pooled")
    return [ctx.out(shape), ctx.out((shape[1],))]


@schema("ClipGrad", domain=FUSED_DOMAIN, inputs=["dY", "X", Input("min", optional=True), Input("max", optional=True)],
        outputs=["dX"])
def infer_clip_grad(ctx):
    """dX like dY and X; min and max, when given, hold one number each (Clip's bounds)."""
    ctx.require_scalar(2, "one lower bound for every element")
    ctx.require_scalar(3, "one upper bound for every element")
    return same_as_inputs(ctx)


@schema("MulGrad", domain=FUSED_DOMAIN, inputs=["dY", "A", "B"], outputs=["dA", "dB"], optional_outputs=("dA", "dB"))
def infer_mul_grad(ctx):
    """dA like A, dB like B; A and B each broadcast to dY's shape (Mul's output)."""
    dy = ctx.shape(0)
    for i, name in ((1, "A"), (2, "B")):
        shape = ctx.shape(i)
        if dy is not None and shape is not None and not broadcasts_to(shape, dy):
            ctx.fail(f"input '{name}' {tuple(shape)} does not broadcast to input 'dY' {tuple(dy)}")
    return [ctx.out(ctx.shape(1)), ctx.out(ctx.shape(2))]


BATCH_NORM_ACTIVATIONS = ("Relu", "HardSwish", "Clip")        # BatchNormActivationGrad's


@schema("BatchNormActivationGrad", domain=FUSED_DOMAIN,
        inputs=["dY", "A", "X", Input("scale", "T1"), Input("mean", "T2"), Input("inv_std", "T2")],
        outputs=["dX", "dscale", "dbias"],
        attrs={**BN_ATTRS, "activation": Attr("string", REQUIRED), "activation_params": Attr("floats")})
def infer_batch_norm_activation_grad(ctx):
    """BatchNormalizationGrad's outputs: dX like X, dscale and dbias (C,) of scale's type; dY and
    A have X's shape."""
    check_activation(ctx, BATCH_NORM_ACTIVATIONS)
    x = check_channels(ctx, 2, (3, 4, 5))
    ctx.require_shape(0, x, "the shape of input 'X', as the activation's output had")
    ctx.require_shape(1, x, "the shape of input 'X', as the activation's input had")
    c = None if x is None else (x[1],)
    parameters = ctx.input(3).dtype
    return [ctx.out(x), ctx.out(c, parameters), ctx.out(c, parameters)]


@schema("SoftmaxCrossEntropyLossWithGrad", domain=FUSED_DOMAIN,
        inputs=["scores", Input("labels", types=LABEL_TYPES), "dY", Input("weights", optional=True)],
        outputs=["output", "d_logits"], attrs=SCE_ATTRS)
def infer_sce_with_grad(ctx):
    """output: the loss (a scalar, or the labels' shape for reduction 'none'); d_logits like
    scores; dY has the loss's shape."""
    check_sce(ctx, 0, 1)
    check_class_weights(ctx, 3, 0)
    if ctx.attrs["reduction"] == "none":
        ctx.require_shape(2, ctx.shape(1), "the labels' shape, as the loss of reduction 'none'")
        loss_shape = ctx.shape(1)
    else:
        ctx.require_scalar(2, f"the loss of reduction {ctx.attrs['reduction']!r} is a scalar")
        loss_shape = ()
    return [ctx.out(loss_shape), ctx.out(ctx.shape(0))]


@schema("BatchNormFold", domain=FUSED_DOMAIN, inputs=["W", "scale", "bias", "mean", "var", Input("B", optional=True)],
        outputs=["W_folded", "B_folded"], attrs={"epsilon": Attr("float", 1e-5)})
def infer_batch_norm_fold(ctx):
    """W_folded like W (a Conv's weight, rank 3 to 5); B_folded and every other input (C,), C =
    W's axis 0."""
    ctx.require_rank(0, range(3, 6), "W")
    if not ctx.attrs["epsilon"] > 0:
        ctx.attr_fail("epsilon", "must be > 0")
    shape = ctx.shape(0)
    channels = None if shape is None else (shape[0],)
    for i in range(1, 6):
        ctx.require_shape(i, channels, f"one entry per output channel of input 'W' {shape}")
    return [ctx.out(shape), ctx.out(channels)]
