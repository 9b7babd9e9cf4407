"""Constant and ConstantOfShape: tensors made from attributes, as graph nodes.

Constant holds exactly one of its value attributes: `value` (a tensor), from opset 12 also
`value_float(s)` (float32) and `value_int(s)` (int64); string and sparse values are refused.
ConstantOfShape fills the shape its int64 input names with the one element of `value`
(float32 0 by default).  Neither has a gradient; their small int64 results (shapes, axes)
and float results carry their values through inference, so the ops downstream know their
shapes.
"""
import numpy as np

from .schema import Attr, Input, TensorType, schema

VALUE_ATTRS = {"value": "tensor", "value_float": "float", "value_floats": "floats", "value_int": "int",
               "value_ints": "ints", "value_string": "string", "value_strings": "string", "sparse_value": "tensor"}
SUPPORTED = ("value", "value_float", "value_floats", "value_int", "value_ints")


def constant_array(fail, attrs):
    """The tensor a Constant node's attributes hold; `fail(message)` raises naming the op when
    none or several are given, or one minitrain does not hold (strings, sparse tensors)."""
    given = [k for k in VALUE_ATTRS if attrs.get(k) is not None]
    if len(given) != 1:
        fail(f"needs exactly one of the attributes {list(SUPPORTED)}, got {given or 'none'}")
    name = given[0]
    if name not in SUPPORTED:
        fail(f"attribute {name!r} is not supported: minitrain's tensors are numbers")
    value = attrs[name]
    if name in ("value_float", "value_floats"):
        return np.asarray(value, dtype=np.float32)
    if name in ("value_int", "value_ints"):
        return np.asarray(value, dtype=np.int64)
    return np.asarray(value)


def known_value(array):
    """The values of a small 1-D int64 or float array as a tuple (what TensorType.value holds:
    shapes, axes, Resize's scales), else None."""
    if array.ndim != 1 or array.size > 16:
        return None
    if array.dtype == np.int64:
        return tuple(int(v) for v in array)
    if array.dtype.kind == "f":
        return tuple(float(v) for v in array)
    return None


def infer_constant(ctx):
    array = constant_array(ctx.fail, ctx.attrs)
    return [TensorType(array.dtype, tuple(array.shape), known_value(array))]


for _v, _names in ((1, ("value",)), (9, ("value",)), (11, ("value", "sparse_value")), (12, tuple(VALUE_ATTRS)),
                   (13, tuple(VALUE_ATTRS)), (19, tuple(VALUE_ATTRS))):
    schema("Constant", since=_v, inputs=[], outputs=["output"],
           attrs={k: Attr(VALUE_ATTRS[k]) for k in _names})(infer_constant)


def fill_value(fail, value):
    """ConstantOfShape's element: `value` (a one-element tensor) or float32 0."""
    if value is None:
        return np.zeros((), np.float32)
    if value.size != 1:
        fail(f"attribute 'value' has shape {value.shape}; expected one element")
    return value.reshape(())


def infer_constant_of_shape(ctx):
    """The output's shape is the input's values, known when the input is a constant."""
    ctx.require_rank(0, 1)
    element = fill_value(ctx.fail, ctx.attrs["value"])
    dims = ctx.input(0).value
    if dims is not None and any(d < 0 for d in dims):
        ctx.fail(f"input 'input' {tuple(dims)} holds a negative dim")
    value = None
    if dims is not None and element.dtype == np.int64 and len(dims) == 1 and dims[0] <= 16:
        value = (int(element),) * dims[0]
    return [TensorType(element.dtype, None if dims is None else tuple(dims), value)]


for _v in (9, 20):
    schema("ConstantOfShape", since=_v, inputs=[Input("input", types=(np.int64,))], outputs=["output"],
           attrs={"value": Attr("tensor")})(infer_constant_of_shape)
