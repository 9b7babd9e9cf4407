"""Resize and Upsample, nearest and linear, and their gradient ResizeGrad (com.microsoft), as
ONNX Runtime builds it (dY, X, roi, scales -> dX, with the forward attributes).

Each resized axis maps output position o to a source coordinate x (the
coordinate_transformation_mode), then nearest mode copies the entry at x rounded
(nearest_mode; clamped into the axis), and linear mode blends the two entries around x (x
clamped into [0, n - 1]).  Axes are independent, so a kernel resizes one axis at a time, and
the gradient adds dY back along the same maps.  The modes PyTorch's exporter emits are served:
half_pixel, pytorch_half_pixel, align_corners, asymmetric (and half_pixel_symmetric from opset
19); cubic mode, antialias and tf_crop_and_resize are refused by name.  align_corners divides
by the output size less one, as ONNX Runtime and PyTorch do (ONNX's reference implementation
takes n * scale, which differs where that product is not whole).

The output size of an axis is floor(n * scale) from `scales`, or `sizes` (then scale = size /
n, or one common scale under keep_aspect_ratio_policy not_larger / not_smaller from opset 18).
Resize-10 and Upsample (7, 9) are asymmetric, and round nearest positions the way ONNX
Runtime does: down when the axis grows, up when it shrinks (nearest_mode "simple", which
ResizeGrad also takes, for their gradients).
"""
import math
from dataclasses import dataclass

import numpy as np

from ..errors import GraphError
from .gradients import gradient
from .schema import GRAPH_FLOAT_TYPES, MS_DOMAIN, REQUIRED, Attr, Input, schema

COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
LEGACY_NEAREST = "simple"
POLICIES = ("stretch", "not_larger", "not_smaller")

RESIZE_11_ATTRS = {"mode": Attr("string", "nearest"), "coordinate_transformation_mode": Attr("string", "half_pixel"),
                   "nearest_mode": Attr("string", "round_prefer_floor"), "cubic_coeff_a": Attr("float", -0.75),
                   "exclude_outside": Attr("int", 0), "extrapolation_value": Attr("float", 0.0)}
RESIZE_18_ATTRS = {**RESIZE_11_ATTRS, "antialias": Attr("int", 0), "axes": Attr("ints"),
                   "keep_aspect_ratio_policy": Attr("string", "stretch")}


@dataclass(frozen=True)
class AxisResize:
    """How one axis is resized: from `size` entries to `out`, by `scale`."""
    size: int
    out: int
    scale: float


def settings(version, attrs):
    """(mode, coordinate mode, nearest mode) of a node of this schema version: Resize-10 and
    Upsample have only `mode`, and mean asymmetric coordinates with the legacy rounding."""
    if version < 11 or "coordinate_transformation_mode" not in attrs:
        return attrs["mode"], "asymmetric", LEGACY_NEAREST
    return attrs["mode"], attrs["coordinate_transformation_mode"], attrs["nearest_mode"]


def check_settings(fail, version, attrs, legacy_rounding=False):
    """Refuse, by name, what the kernels do not implement; `legacy_rounding` admits nearest_mode
    "simple" (ResizeGrad's, for the gradients of Resize-10 and Upsample)."""
    mode, coordinates, nearest = settings(version, attrs)
    if mode not in ("nearest", "linear"):
        fail(f"attribute 'mode'={mode!r} is not supported: expected 'nearest' or 'linear'")
    modes = COORDINATE_MODES + (("half_pixel_symmetric",) if version >= 19 else ())
    if coordinates not in modes:
        fail(f"attribute 'coordinate_transformation_mode'={coordinates!r} is not supported: expected one of "
             f"{list(modes)}")
    nearest_modes = NEAREST_MODES + ((LEGACY_NEAREST,) if legacy_rounding or version < 11 else ())
    if nearest not in nearest_modes:
        fail(f"attribute 'nearest_mode'={nearest!r} is not one of {list(nearest_modes)}")
    if attrs.get("antialias"):
        fail("attribute 'antialias'=1 is not supported")
    if attrs.get("keep_aspect_ratio_policy", "stretch") not in POLICIES:
        fail(f"attribute 'keep_aspect_ratio_policy'={attrs['keep_aspect_ratio_policy']!r} is not one of "
             f"{list(POLICIES)}")


def resized_axes(fail, attrs, rank):
    """The axes that scales and sizes list: `axes` (from opset 18) or all of them."""
    axes = attrs.get("axes")
    if axes is None:
        return list(range(rank))
    bad = [a for a in axes if not -rank <= a < rank]
    if bad:
        fail(f"attribute 'axes' {tuple(axes)} holds {bad[0]}, out of range for an input of rank {rank}")
    normal = [a + rank if a < 0 else a for a in axes]
    if len(set(normal)) != len(normal):
        fail(f"attribute 'axes' {tuple(axes)} names an axis twice")
    return normal


def resize_plan(fail, attrs, shape, scales=None, sizes=None):
    """One AxisResize per axis of an input of `shape`, from `scales` or `sizes` (exactly one
    given, as lists); `fail` names what is wrong."""
    axes = resized_axes(fail, attrs, len(shape))
    if (scales is None) == (sizes is None):
        fail("needs exactly one of the inputs 'scales' and 'sizes' (an empty tensor counts as absent)")
    given = scales if scales is not None else sizes
    name = "scales" if scales is not None else "sizes"
    if len(given) != len(axes):
        fail(f"input {name!r} has {len(given)} entries; expected {len(axes)}, one per resized axis")
    plan = [AxisResize(d, d, 1.0) for d in shape]
    if scales is not None:
        for a, s in zip(axes, scales):
            if not (s > 0 and math.isfinite(s)):
                fail(f"input 'scales' {tuple(scales)} holds {s}; scales must be positive")
            plan[a] = AxisResize(shape[a], int(math.floor(shape[a] * s)), float(s))
        return plan
    if any(s < 0 for s in sizes):
        fail(f"input 'sizes' {tuple(sizes)} holds a negative size")
    if any(shape[a] == 0 for a in axes):
        fail(f"cannot resize the empty axes of an input of shape {tuple(shape)} to a size")
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    if policy == "stretch":
        for a, s in zip(axes, sizes):
            plan[a] = AxisResize(shape[a], int(s), int(s) / shape[a])
        return plan
    ratios = [int(s) / shape[a] for a, s in zip(axes, sizes)]
    common = min(ratios) if policy == "not_larger" else max(ratios)
    for a in axes:
        plan[a] = AxisResize(shape[a], int(math.floor(shape[a] * common + 0.5)), common)
    return plan


def source_coordinates(coordinates, axis):
    """The source coordinate of each output position of `axis` (float64)."""
    o = np.arange(axis.out, dtype=np.float64)
    if coordinates == "asymmetric":
        return o / axis.scale
    if coordinates == "align_corners":
        return np.zeros_like(o) if axis.out == 1 else o * (axis.size - 1) / (axis.out - 1)
    if coordinates == "pytorch_half_pixel" and axis.out == 1:
        return np.zeros_like(o)
    x = (o + 0.5) / axis.scale - 0.5
    if coordinates == "half_pixel_symmetric":
        adjustment = axis.out / (axis.scale * axis.size)
        x += axis.size / 2 * (1 - adjustment)
    return x


def nearest_positions(nearest, axis, x):
    """The input position each output position copies in nearest mode."""
    if nearest == LEGACY_NEAREST:
        nearest = "floor" if axis.scale >= 1 else "ceil"
    rounded = {"round_prefer_floor": np.ceil(x - 0.5), "round_prefer_ceil": np.floor(x + 0.5),
               "floor": np.floor(x), "ceil": np.ceil(x)}[nearest]
    return np.clip(rounded, 0, axis.size - 1).astype(np.int64)


def linear_taps(axis, x):
    """(left position, right position, right weight) of each output position in linear mode."""
    x = np.clip(x, 0, axis.size - 1)
    left = np.floor(x).astype(np.int64)
    right = np.minimum(left + 1, axis.size - 1)
    return left, right, x - left


def is_identity(mode, coordinates, axis):
    """Whether an axis maps every output position onto the same input position."""
    return axis.out == axis.size and axis.scale == 1.0 and (mode == "nearest" or coordinates != "half_pixel_symmetric")


def scale_list(value):
    """A scales or sizes input as a list, None when absent or empty (ONNX's 'not given')."""
    if value is None:
        return None
    flat = np.asarray(value).reshape(-1)
    if flat.size == 0:
        return None
    return [int(v) for v in flat] if np.issubdtype(flat.dtype, np.integer) else [float(v) for v in flat]


def node_plan(fail, version, attrs, shape, scales, sizes):
    """(plan, mode, coordinates, nearest) of a Resize or Upsample node of this schema version,
    its settings checked: what a kernel of either provider runs."""
    check_settings(fail, version, attrs)
    return (resize_plan(fail, attrs, shape, scales, sizes),) + settings(version, attrs)


def grad_plan(fail, attrs, x_shape, dy_shape, scales):
    """The plan of a ResizeGrad node (X's axes resized to dY's), dY's shape checked against it;
    without scales, each axis's size is dY's."""
    check_settings(fail, 19, attrs, legacy_rounding=True)
    x_shape, dy_shape = tuple(x_shape), tuple(dy_shape)
    if len(dy_shape) != len(x_shape):
        fail(f"input 'dY' has rank {len(dy_shape)}; X has rank {len(x_shape)}")
    if scales is None:
        axes = resized_axes(fail, attrs, len(x_shape))
        plan = resize_plan(fail, {**attrs, "keep_aspect_ratio_policy": "stretch"}, x_shape, None,
                           [dy_shape[a] for a in axes])
    else:
        plan = resize_plan(fail, attrs, x_shape, scales, None)
    expected = tuple(a.out for a in plan)
    if dy_shape != expected:
        fail(f"input 'dY' has shape {dy_shape}; expected {expected}, input 'X' of shape {x_shape} resized")
    return plan


# --------------------------------------------------------------------------- schemas
def _static_list(ctx, i):
    """A scales or sizes input's values when inference knows them: (known, list or None)."""
    t = ctx.input(i)
    if t is None:
        return True, None
    if t.shape is not None and len(t.shape) == 1 and t.shape[0] == 0:
        return True, None
    return (t.value is not None), (list(t.value) if t.value is not None else None)


def infer_resize(ctx):
    version = ctx.schema.since_version
    check_settings(ctx.fail, version, ctx.attrs)
    shape = ctx.shape(0)
    if ctx.op_type == "Upsample" and version < 9:
        scales, known_scales = list(ctx.attrs["scales"]), True
        sizes, known_sizes = None, True
    else:
        scales_index = 1 if version < 11 else 2
        known_scales, scales = _static_list(ctx, scales_index)
        known_sizes, sizes = _static_list(ctx, 3) if version >= 11 else (True, None)
    known = known_scales and known_sizes and (scales is not None or sizes is not None)
    if shape is None or not known:
        return [ctx.out(None)]
    symbolic = [i for i, d in enumerate(shape) if not isinstance(d, int)]
    if symbolic and scales is None:
        return [ctx.out(None)]
    # With scales each axis resizes on its own: a symbolic dim (the batch) under a scale of 1
    # stays in the output, whose other dims are then known to the nodes after it (a Concat's
    # gradient splits by constant sizes).
    plan = resize_plan(ctx.fail, ctx.attrs, [1 if i in symbolic else d for i, d in enumerate(shape)], scales, sizes)
    if any(plan[i].scale != 1.0 for i in symbolic):
        return [ctx.out(None)]
    return [ctx.out(tuple(shape[i] if i in symbolic else a.out for i, a in enumerate(plan)))]


SCALES = Input("scales", types=GRAPH_FLOAT_TYPES)
schema("Upsample", since=7, inputs=["X"], attrs={"mode": Attr("string", "nearest"),
                                                 "scales": Attr("floats", REQUIRED)})(infer_resize)
schema("Upsample", since=9, inputs=["X", SCALES], attrs={"mode": Attr("string", "nearest")})(infer_resize)
schema("Resize", since=10, inputs=["X", SCALES], attrs={"mode": Attr("string", "nearest")})(infer_resize)
_RESIZE_INPUTS = ["X", Input("roi", types=GRAPH_FLOAT_TYPES, optional=True),
                  Input("scales", types=GRAPH_FLOAT_TYPES, optional=True),
                  Input("sizes", types=(np.int64,), optional=True)]
for _v, _attrs in ((11, RESIZE_11_ATTRS), (13, RESIZE_11_ATTRS), (18, RESIZE_18_ATTRS), (19, RESIZE_18_ATTRS)):
    schema("Resize", since=_v, inputs=_RESIZE_INPUTS, attrs=_attrs)(infer_resize)


@schema("ResizeGrad", domain=MS_DOMAIN, inputs=["dY", "X", Input("roi", types=GRAPH_FLOAT_TYPES, optional=True),
                                                Input("scales", types=GRAPH_FLOAT_TYPES, optional=True)],
        outputs=["dX"], attrs={**RESIZE_18_ATTRS, "nearest_mode": Attr("string", "round_prefer_floor")})
def infer_resize_grad(ctx):
    """dX has X's shape.  Without scales, each axis's scale is dY's size over X's."""
    check_settings(ctx.fail, 19, ctx.attrs, legacy_rounding=True)
    return [ctx.out(ctx.shape(1))]


# --------------------------------------------------------------------------- gradients
LEGACY_GRAD_ATTRS = {"coordinate_transformation_mode": "asymmetric", "nearest_mode": LEGACY_NEAREST}


@gradient("Upsample", since=7, emits=("ResizeGrad",))
def upsample_gradient(g):
    attrs = {"mode": g.attrs.get("mode", "nearest"), **LEGACY_GRAD_ATTRS}
    if g.opset < 9:
        scales = g.constant(np.array(g.attrs["scales"], dtype=np.float32), "scales")
    else:
        scales = g.I(1)
    g.node("ResizeGrad", [g.GO(0), g.I(0), "", scales], [g.GI(0)], attrs, domain=MS_DOMAIN)


@gradient("Resize", since=10, emits=("ResizeGrad",))
def resize_gradient(g):
    if g.opset < 11:
        attrs = {"mode": g.attrs.get("mode", "nearest"), **LEGACY_GRAD_ATTRS}
        g.node("ResizeGrad", [g.GO(0), g.I(0), "", g.I(1)], [g.GI(0)], attrs, domain=MS_DOMAIN)
        return
    if g.attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch" and g.I(3):
        raise GraphError(f"gradient of Resize (node {g.forward.name!r}): keep_aspect_ratio_policy "
                         f"{g.attrs['keep_aspect_ratio_policy']!r} with 'sizes' has no gradient (ResizeGrad "
                         "takes the scales, or dY's size over X's)")
    g.node("ResizeGrad", [g.GO(0), g.I(0), g.I(1), g.I(2)], [g.GI(0)], dict(g.attrs), domain=MS_DOMAIN)
