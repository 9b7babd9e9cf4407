"""OneHot: a new axis of `depth` entries at `axis` (default -1, the last), `values[1]` at each
index and `values[0]` elsewhere.  An index outside the range yields a row of `values[0]`; the
range is [0, depth) at opset 9 and [-depth, depth) from 11, a negative index counting from
the end.  The output shape is known when depth is a constant (nn.functional.one_hot makes it
one).  Indices and depth are int64 or int32 (ONNX also admits floats, which minitrain
refuses rather than truncates).  It has no gradient."""
import numpy as np

from .schema import Attr, Input, schema
from .shape_utils import normalize_axis

INDICES = (np.int64, np.int32)


def infer_one_hot(ctx):
    ctx.require_scalar(1, "the number of classes")
    values = ctx.shape(2)
    if values is not None and (len(values) != 1 or isinstance(values[0], int) and values[0] != 2):
        ctx.fail(f"input 'values' has shape {tuple(values)}; expected (2,): [off_value, on_value]")
    shape = ctx.shape(0)
    if shape is None:
        return [ctx.out(None)]
    axis = normalize_axis(ctx, ctx.attrs["axis"], len(shape) + 1)
    depth = ctx.input(1).value
    if depth is None:
        return [ctx.out(None)]
    if depth[0] <= 0:
        ctx.fail(f"input 'depth' is {depth[0]}; expected a positive number of classes")
    return [ctx.out(tuple(shape[:axis]) + (int(depth[0]),) + tuple(shape[axis:]))]


for _v in (9, 11):
    schema("OneHot", since=_v, inputs=[Input("indices", types=INDICES), Input("depth", types=INDICES),
                                       "values"], outputs=["output"], attrs={"axis": Attr("int", -1)})(infer_one_hot)
