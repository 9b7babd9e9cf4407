"""Softmax and LogSoftmax in both ONNX forms, and their gradients.

Opsets 1-12 coerce the input to 2-D at `axis` (default 1) and normalise over the flattened
trailing block; opset 13+ normalises along the single `axis` (default -1).  The gradients
follow ONNX Runtime: SoftmaxGrad / LogSoftmaxGrad (com.microsoft) take the coerced form,
SoftmaxGrad_13 / LogSoftmaxGrad_13 the single-axis form; both read dY and the forward Y.
"""
import math

from .activation import same_as_inputs
from .gradients import gradient
from .schema import MS_DOMAIN, Attr, schema
from .shape_utils import normalize_axis


def axis_layout(shape, axis, coerce_2d):
    """(outer, n, inner) of the normalised axis: the whole trailing block at `axis` when the
    op coerces to 2-D (opset < 13), else the single axis."""
    rank = len(shape)
    axis = axis + rank if axis < 0 else axis
    outer = math.prod(shape[:axis])       # math.prod: np.prod's call overhead outweighs this work
    if coerce_2d:
        return outer, math.prod(shape[axis:]), 1
    return outer, int(shape[axis]), math.prod(shape[axis + 1:])


def softmax_inference(ctx):
    shape = ctx.shape(0)
    if shape is not None:
        normalize_axis(ctx, ctx.attrs["axis"], len(shape))
    return [ctx.out(shape)]


def softmax_grad_inference(ctx):
    shape = ctx.shape(0)
    if shape is not None:
        normalize_axis(ctx, ctx.attrs["axis"], len(shape))
    return same_as_inputs(ctx)


for _op in ("Softmax", "LogSoftmax"):
    for _v in (1, 11):
        schema(_op, since=_v, inputs=["input"], outputs=["output"], attrs={"axis": Attr("int", 1)})(softmax_inference)
    schema(_op, since=13, inputs=["input"], outputs=["output"], attrs={"axis": Attr("int", -1)})(softmax_inference)
    schema(f"{_op}Grad", domain=MS_DOMAIN, inputs=["dY", "Y"], outputs=["dX"],
           attrs={"axis": Attr("int", 1)})(softmax_grad_inference)
    schema(f"{_op}Grad_13", domain=MS_DOMAIN, inputs=["dY", "Y"], outputs=["dX"],
           attrs={"axis": Attr("int", -1)})(softmax_grad_inference)


def _softmax_family_gradient(op):
    def build_coerced(g):
        g.node(f"{op}Grad", [g.GO(0), g.O(0)], [g.GI(0)], {"axis": g.attrs.get("axis", 1)}, domain=MS_DOMAIN)

    def build_single_axis(g):
        g.node(f"{op}Grad_13", [g.GO(0), g.O(0)], [g.GI(0)], {"axis": g.attrs.get("axis", -1)}, domain=MS_DOMAIN)
    gradient(op, since=1, emits=(f"{op}Grad",))(build_coerced)
    gradient(op, since=13, emits=(f"{op}Grad_13",))(build_single_axis)


_softmax_family_gradient("Softmax")
_softmax_family_gradient("LogSoftmax")
