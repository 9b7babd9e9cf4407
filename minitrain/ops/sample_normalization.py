"""Per-sample normalisations: LayerNormalization (ONNX 17, and com.microsoft's, which ONNX
Runtime's exporters and gradient builder use), InstanceNormalization (ONNX 6) and
GroupNormalization (ONNX 18: scale and bias per group; 21: per channel), with their gradients.

Each views X as rows normalised independently (mean and biased variance over the row) and an
affine transform whose scale and bias entry depends on the position in the row:

- LayerNormalization(axis): rows are X.shape[:axis], a row is X.shape[axis:]; scale and bias
  hold one entry per row element (a shape that broadcasts to X.shape[axis:] with as many
  elements, as ONNX Runtime requires; the bias of the scale's shape).
- InstanceNormalization: a row per (sample, channel), over the spatial dims; scale, bias (C,).
- GroupNormalization(num_groups): a row per (sample, group), over the group's channels and
  the spatial dims; scale and bias (G,) at version 18, (C,) at 21.

`layout` gives (rows, cols, period, stride): the affine entry of element `col` of row `row` is
((row % period) * cols + col) // stride, which every kernel uses.

The forward ops also produce the row statistics the gradient reads (mean and inv_std_dev,
1 / sqrt(var + epsilon)): LayerNormalization's Mean and InvStdDev, shaped X.shape[:axis] + ones
as ONNX defines them; InstanceNormalization's and GroupNormalization's optional outputs `mean`
and `inv_std_dev` of shape (N, C) or (N, G), which ONNX does not define (as BatchNormalization's
saved_mean).  They are computed in float32 for float16 data (stash_type 1, the only one
supported, as in ONNX's reference) and in the data's type otherwise, and stored in the data's
type as ONNX's reference and BatchNormalization's saved statistics are.  ONNX Runtime's gradient builder
emits LayerNormalizationGrad; it has none for the other two, whose gradients here follow the
same contract: (dY, X, scale, mean, inv_std_dev) -> (dX, dscale, dbias).
"""
import math

import numpy as np

from .gradients import gradient
from .schema import MS_DOMAIN, REQUIRED, Attr, Input, schema
from .shape_utils import normalize_axis

EPSILON = {"epsilon": Attr("float", 1e-5)}
STASH = {"stash_type": Attr("int", 1)}
LAYER_NORM_ATTRS = {"axis": Attr("int", -1), **EPSILON, **STASH}
GROUP_NORM_ATTRS = {**EPSILON, "num_groups": Attr("int", REQUIRED)}
GRAD_OUTPUTS = ("dX", "dscale", "dbias")


def accumulation_dtype(dtype):
    """The type the statistics are computed in: float32 for float16 data."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def layout(op_type, shape, attrs, scale_size):
    """(rows, cols, period, stride) of X's shape for `op_type` (see the module docstring);
    GroupNormalization's scale is per channel when it has C entries, else per group."""
    if op_type.startswith("LayerNormalization"):
        axis = attrs["axis"] + len(shape) if attrs["axis"] < 0 else attrs["axis"]
        return math.prod(shape[:axis]), math.prod(shape[axis:]), 1, 1
    n, c, spatial = shape[0], shape[1], math.prod(shape[2:])
    if op_type.startswith("InstanceNormalization"):
        return n * c, spatial, c, spatial
    groups = attrs["num_groups"]
    cols = c // groups * spatial
    return n * groups, cols, groups, spatial if scale_size == c else cols


def stats_shape(op_type, shape, attrs):
    """The shape of the mean and inv_std_dev of an input of `shape`."""
    if op_type.startswith("LayerNormalization"):
        axis = attrs["axis"] + len(shape) if attrs["axis"] < 0 else attrs["axis"]
        return tuple(shape[:axis]) + (1,) * (len(shape) - axis)
    return (shape[0], shape[1] if op_type.startswith("InstanceNormalization") else attrs["num_groups"])


def _check_attrs(ctx):
    if not ctx.attrs["epsilon"] > 0:
        ctx.attr_fail("epsilon", "must be > 0")
    if ctx.attrs.get("stash_type", 1) != 1:
        ctx.attr_fail("stash_type", "is not supported: only 1 (statistics in float32, float64 for float64 data)")


def _param_shape(ctx, x_index, version):
    """(exact, normalized, what): the shape scale and bias must have for X (input x_index),
    or for LayerNormalization the normalised shape they must match; checks X's rank and the
    attributes on the way.  The gradient of GroupNormalization (version None) takes either
    form."""
    x = ctx.shape(x_index)
    if ctx.op_type.startswith("LayerNormalization"):
        axis = normalize_axis(ctx, ctx.attrs["axis"], len(x))
        return None, tuple(x[axis:]), "element of the normalised shape"
    instance = ctx.op_type.startswith("InstanceNormalization")
    ctx.require_rank(x_index, range(3 if instance else 2, 9))
    channels = x[1]
    if instance:
        return (channels,), None, "channel"
    groups = ctx.attrs["num_groups"]
    if groups < 1:
        ctx.attr_fail("num_groups", "must be >= 1")
    if isinstance(channels, int) and channels % groups:
        ctx.attr_fail("num_groups", f"must divide the {channels} channels of X {tuple(x)}")
    if version is None:
        return None, None, "group or channel"
    return ((groups,), None, "group") if version < 21 else ((channels,), None, "channel")


def _check_param(ctx, i, x, exact, normalized, what):
    """Scale or bias (input i): `exact` shape; or as many elements as the normalised shape
    `normalized`, in a shape that broadcasts to it (LayerNormalization); or, for the gradient
    of GroupNormalization, one entry per group or per channel."""
    shape = ctx.shape(i)
    if shape is None:
        return
    if exact is not None:
        ctx.require_shape(i, exact, f"one entry per {what} of X {tuple(x)}")
        return
    if normalized is not None:
        if not all(isinstance(d, int) for d in (*shape, *normalized)):
            return
        broadcasts = len(shape) <= len(normalized) and all(
            a in (1, b) for a, b in zip(reversed(shape), reversed(normalized)))
        if broadcasts and math.prod(shape) == math.prod(normalized):
            return
    elif len(shape) == 1 and shape[0] in (x[1], ctx.attrs["num_groups"]):
        return
    ctx.fail(f"input {ctx.schema.inputs[i].name!r} has shape {tuple(shape)}; expected one entry per {what} of "
             f"X {tuple(x)}" + (f" (normalised shape {normalized})" if normalized else ""))


def _infer(version):
    def infer(ctx):
        """Y like X; the statistics (mean, inv_std_dev) per row."""
        _check_attrs(ctx)
        x = ctx.shape(0)
        if x is None:
            return [ctx.out(None)] * 3
        _check_param(ctx, 1, x, *_param_shape(ctx, 0, version))
        ctx.require_shape(2, ctx.shape(1), "the shape of the scale, whose shape the gradient gives the bias")
        s = stats_shape(ctx.op_type, x, ctx.attrs)
        return [ctx.out(x), ctx.out(s), ctx.out(s)]
    return infer


def infer_grad(ctx):
    """dX like X, dscale and dbias like scale; mean and inv_std_dev as the forward op made them."""
    _check_attrs(ctx)
    x = ctx.shape(1)
    if x is None:
        return [ctx.out(None), ctx.out(ctx.shape(2)), ctx.out(ctx.shape(2))]
    ctx.require_shape(0, x, "the shape of input 'X', as Y had")
    rule = _param_shape(ctx, 1, None if ctx.op_type.startswith("Group") else 1)
    _check_param(ctx, 2, x, *rule)
    forward = ctx.op_type[:-len("Grad")]
    for i in (3, 4):
        ctx.require_shape(i, stats_shape(forward, x, ctx.attrs), f"the statistics {forward} made of X {tuple(x)}")
    return [ctx.out(x), ctx.out(ctx.shape(2)), ctx.out(ctx.shape(2))]


for _domain, _since in (("", 17), (MS_DOMAIN, 1)):
    schema("LayerNormalization", domain=_domain, since=_since, inputs=["X", "Scale", Input("B", optional=True)],
           outputs=["Y", "Mean", "InvStdDev"], attrs=LAYER_NORM_ATTRS,
           optional_outputs=("Mean", "InvStdDev"))(_infer(_since))
schema("InstanceNormalization", since=6, inputs=["input", "scale", "B"], outputs=["output", "mean", "inv_std_dev"],
       attrs=EPSILON, optional_outputs=("mean", "inv_std_dev"))(_infer(6))
schema("GroupNormalization", since=18, inputs=["X", "scale", "bias"], outputs=["Y", "mean", "inv_std_dev"],
       attrs=GROUP_NORM_ATTRS, optional_outputs=("mean", "inv_std_dev"))(_infer(18))
schema("GroupNormalization", since=21, inputs=["X", "scale", "bias"], outputs=["Y", "mean", "inv_std_dev"],
       attrs={**GROUP_NORM_ATTRS, **STASH}, optional_outputs=("mean", "inv_std_dev"))(_infer(21))

_GRAD_INPUTS = ["dY", "X", "scale", "mean", "inv_std_dev"]
schema("LayerNormalizationGrad", domain=MS_DOMAIN, inputs=_GRAD_INPUTS, outputs=GRAD_OUTPUTS,
       attrs=LAYER_NORM_ATTRS)(infer_grad)
schema("InstanceNormalizationGrad", domain=MS_DOMAIN, inputs=_GRAD_INPUTS, outputs=GRAD_OUTPUTS,
       attrs=EPSILON)(infer_grad)
schema("GroupNormalizationGrad", domain=MS_DOMAIN, inputs=_GRAD_INPUTS, outputs=GRAD_OUTPUTS,
       attrs={**GROUP_NORM_ATTRS, **STASH})(infer_grad)


def _gradient_of(op_type):
    def build(g):
        g.node(f"{op_type}Grad", [g.GO(0), g.I(0), g.I(1), g.O(1), g.O(2)], [g.GI(0), g.GI(1), g.GI(2)],
               g.attrs, domain=MS_DOMAIN)
    return build


for _domain, _since, _op in (("", 17, "LayerNormalization"), (MS_DOMAIN, 1, "LayerNormalization"),
                             ("", 6, "InstanceNormalization"), ("", 18, "GroupNormalization")):
    gradient(_op, domain=_domain, since=_since, differentiable=(0, 1, 2),
             emits=(f"{_op}Grad",))(_gradient_of(_op))
