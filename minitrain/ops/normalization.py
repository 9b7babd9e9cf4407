"""BatchNormalization (ONNX 9, 14, 15) and its gradient, BatchNormalizationGrad (com.microsoft).

X is (N, C, D1, ..., Dk) with k = 0..3; scale, B, input_mean and input_var are (C,).
Statistics are taken per channel over N and the spatial dims.

- training_mode=1: Y normalises with the batch mean and (biased) variance; running_mean and
  running_var are `momentum * input + (1 - momentum) * batch` (ONNX's convention: PyTorch's
  momentum 0.1 is ONNX's 0.9; the variance is the biased one, as in ONNX's reference).
- training_mode=0: Y normalises with input_mean and input_var; running_mean/running_var are
  not produced (asking for them is an error), as ONNX specifies.

Version 9 has no training_mode: as in ONNX Runtime, a node is in training mode when it produces
the running statistics (its outputs 1 and 2), which is how PyTorch exports training-mode models
at opsets 9-13.  Its outputs carry the names of version 14's.

Like ONNX Runtime's training BatchNormalization, the op also yields saved_mean and
saved_inv_std (the mean and 1/sqrt(var + epsilon) Y was normalised with), which is what the
gradient reads instead of recomputing them.

Element types as ONNX's: version 9 has one float type T; version 14 gives the statistics
(input_mean, input_var, running_mean, running_var) a type U of their own; version 15 splits scale
and B off X's type T as T1 and calls the statistics' type T2.  So float16 or bfloat16 data may be
normalised with float32 parameters and statistics, which is how mixed precision runs it.  The
saved statistics have the statistics' type, and BatchNormalizationGrad takes X and dY of T, scale
of T1 and the saved statistics of T2, and gives dscale and dbias of T1, as ONNX Runtime's
BatchNormInternal and BatchNormalizationGrad do.
"""
from .gradients import gradient
from .schema import MS_DOMAIN, Attr, Input, schema

BN9_ATTRS = {"epsilon": Attr("float", 1e-5), "momentum": Attr("float", 0.9)}
BN_ATTRS = {**BN9_ATTRS, "training_mode": Attr("int", 0)}
BN_OUTPUTS = ("Y", "running_mean", "running_var", "saved_mean", "saved_inv_std")
RUNNING_OUTPUTS = (1, 2)


def is_training(attrs, wants):
    """Whether a BatchNormalization normalises with batch statistics: its training_mode
    (version 14 on), else whether it produces the running statistics (`wants(name)`)."""
    if "training_mode" in attrs:
        return bool(attrs["training_mode"])
    return any(wants(BN_OUTPUTS[i]) for i in RUNNING_OUTPUTS)


def check_channels(ctx, x_index, channel_inputs):
    """X (input x_index) is (N, C, spatial...) with at most 3 spatial dims; each channel input
    is (C,).  Returns X's shape."""
    ctx.require_rank(x_index, (2, 3, 4, 5))
    if not ctx.attrs["epsilon"] > 0:
        ctx.attr_fail("epsilon", "must be > 0")
    x = ctx.shape(x_index)
    channels = None if x is None else x[1]
    for i in channel_inputs:
        ctx.require_shape(i, (channels,), f"one entry per channel of input 'X' {None if x is None else tuple(x)}")
    return x


def infer_batchnorm(ctx):
    """Y like X; running stats and saved statistics of shape (C,), of the statistics' type."""
    x = check_channels(ctx, 0, (1, 2, 3, 4))
    if not 0 <= ctx.attrs["momentum"] <= 1:
        ctx.attr_fail("momentum", "must be in [0, 1]")
    if "training_mode" in ctx.attrs and not ctx.attrs["training_mode"] and \
            (ctx.wants("running_mean") or ctx.wants("running_var")):
        ctx.fail("running_mean/running_var are only produced in training mode (training_mode=1)")
    c = None if x is None else (x[1],)
    stats = ctx.input(3).dtype
    return [ctx.out(x), ctx.out(c, stats), ctx.out(c, stats), ctx.out(c, stats), ctx.out(c, stats)]


def batchnorm_inputs(parameters, statistics):
    """X, scale, B, input_mean, input_var with scale and B of type `parameters` and the
    statistics of type `statistics` (type variable names)."""
    return ["X", Input("scale", parameters), Input("B", parameters), Input("input_mean", statistics),
            Input("input_var", statistics)]


for _v, _attrs, _types in ((9, BN9_ATTRS, ("T", "T")), (14, BN_ATTRS, ("T", "U")), (15, BN_ATTRS, ("T1", "T2"))):
    schema("BatchNormalization", since=_v, inputs=batchnorm_inputs(*_types),
           outputs=BN_OUTPUTS, attrs=_attrs, optional_outputs=BN_OUTPUTS[1:])(infer_batchnorm)


@schema("BatchNormalizationGrad", domain=MS_DOMAIN,
        inputs=["dY", "X", Input("scale", "T1"), Input("mean", "T2"), Input("inv_std", "T2")],
        outputs=["dX", "dscale", "dbias"], attrs=BN_ATTRS)
def infer_batchnorm_grad(ctx):
    """dX like X; dscale and dbias (C,) of scale's type.  With training_mode=1, mean and inv_std
    are the batch statistics and dX includes the paths through them; with 0 they are constants."""
    x = check_channels(ctx, 1, (2, 3, 4))
    ctx.require_shape(0, x, "the shape of input 'X', as Y had")
    c = None if x is None else (x[1],)
    parameters = ctx.input(2).dtype
    return [ctx.out(x), ctx.out(c, parameters), ctx.out(c, parameters)]


@gradient("BatchNormalization", since=9, differentiable=(0, 1, 2), emits=("BatchNormalizationGrad",))
def batchnorm9_gradient(g):
    """Version 9's gradient: the mode is the forward node's, read from its outputs."""
    training = any(i < len(g.forward.outputs) and g.forward.outputs[i] for i in RUNNING_OUTPUTS)
    g.node("BatchNormalizationGrad", [g.GO(0), g.I(0), g.I(1), g.O(3), g.O(4)], [g.GI(0), g.GI(1), g.GI(2)],
           {**g.attrs, "training_mode": int(training)}, domain=MS_DOMAIN)


@gradient("BatchNormalization", since=14, differentiable=(0, 1, 2), emits=("BatchNormalizationGrad",))
def batchnorm_gradient(g):
    g.node("BatchNormalizationGrad", [g.GO(0), g.I(0), g.I(1), g.O(3), g.O(4)], [g.GI(0), g.GI(1), g.GI(2)],
           g.attrs, domain=MS_DOMAIN)
