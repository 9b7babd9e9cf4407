"""Comparisons (Equal, Greater, Less, GreaterOrEqual, LessOrEqual), And and Cast.  The gradients
of ReduceMax (Equal, Cast) and Clip (Less, Greater) build their masks from them; the others
serve graphs that use them (an imported model, a mask in a loss).  Comparisons broadcast and
yield bool and have no gradient.  Cast between float types is differentiable, as ONNX Runtime's
Cast gradient: the gradient is cast back to the input's type (the autocast pass's casts hand
float32 gradients to the float32 master weights this way)."""
import numpy as np

from ..bfloat16 import BFLOAT16_TYPES
from .gradients import gradient
from .schema import GRAPH_FLOAT_TYPES, INDEX_TYPES, REQUIRED, TENSOR_PROTO_DTYPES, Attr, Input, schema
from .shape_utils import broadcast_shapes

BOOL = (np.bool_,)

# The ONNX TensorProto.DataType codes of the element types minitrain serves: the graph's float
# types (bfloat16 only on CUDA), int32, int64 and bool.
ONNX_DTYPES = {code: dtype for code, dtype in TENSOR_PROTO_DTYPES.items()
               if dtype in GRAPH_FLOAT_TYPES + INDEX_TYPES + (np.dtype(np.bool_),)}
ONNX_CODE = {dtype: code for code, dtype in ONNX_DTYPES.items()}
CAST_TYPES = tuple(ONNX_DTYPES.values())
HOST_CAST_TYPES = tuple(t for t in CAST_TYPES if t not in BFLOAT16_TYPES)   # the CPU kernel's


def infer_comparison(ctx):
    """A bool tensor of the inputs' broadcast shape."""
    return [ctx.out(broadcast_shapes(ctx, [t.shape for t in ctx.input_types]), np.bool_)]


for _op, _versions in (("Equal", (7, 11, 13, 19)), ("Greater", (7, 9, 13)), ("Less", (7, 9, 13)),
                       ("GreaterOrEqual", (12, 16)), ("LessOrEqual", (12, 16))):
    for _v in _versions:
        schema(_op, since=_v, inputs=["A", "B"], outputs=["C"])(infer_comparison)
schema("And", since=7, inputs=[Input("A", types=BOOL), Input("B", types=BOOL)],
       outputs=["C"])(infer_comparison)


def infer_cast(ctx):
    """The input's shape in the element type that `to` (an ONNX TensorProto code) names."""
    to = ctx.attrs["to"]
    if to not in ONNX_DTYPES:
        ctx.attr_fail("to", f"names no element type minitrain serves; expected one of "
                            f"{ {c: str(d) for c, d in ONNX_DTYPES.items()} }")
    return [ctx.out(ctx.shape(0), ONNX_DTYPES[to])]


for _v in (6, 9, 13):
    schema("Cast", since=_v, inputs=[Input("input", types=CAST_TYPES)], outputs=["output"],
           attrs={"to": Attr("int", REQUIRED)})(infer_cast)
schema("Cast", since=19, inputs=[Input("input", types=CAST_TYPES)], outputs=["output"],
       attrs={"to": Attr("int", REQUIRED), "saturate": Attr("int", 1)})(infer_cast)


@gradient("Cast", since=6, emits=("Cast",))
def cast_grad(g):
    """dX = Cast(dY) to the input's type."""
    g.node("Cast", [g.GO(0)], [g.GI(0)], {"to": ONNX_CODE[g.type_of(g.I(0)).dtype]})
