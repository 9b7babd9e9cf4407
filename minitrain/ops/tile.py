"""Tile: the input repeated `repeats[i]` times along each axis i (repeats an int64 input, one
entry per axis, read from host memory).

Its gradient is ONNX Runtime's: dY reshaped to (r0, d0, r1, d1, ...) and summed over the
repeat axes (0, 2, 4, ...).  The interleaved shape is a constant when the repeats and all but
one of the input's dims are known (the unknown one, a batch dim say, becomes the reshape's -1),
else it is gathered from the repeats and the input's shape on the host.
"""
import numpy as np

from ..errors import GraphError
from .gradients import gradient
from .schema import GRAPH_DATA_TYPES, Input, schema


def check_repeats(fail, rank, repeats):
    repeats = tuple(int(r) for r in repeats)
    if len(repeats) != rank:
        fail(f"input 'repeats' {repeats} has {len(repeats)} entries; the input has rank {rank}")
    if any(r < 0 for r in repeats):
        fail(f"input 'repeats' {repeats} holds a negative count")
    return repeats


def infer_tile(ctx):
    ctx.require_rank(1, 1)
    shape, repeats = ctx.shape(0), ctx.input(1).value
    if shape is None or repeats is None:
        return [ctx.out(None)]
    repeats = check_repeats(ctx.fail, len(shape), repeats)
    if any(not isinstance(d, int) and r != 1 for d, r in zip(shape, repeats)):
        return [ctx.out(None)]
    return [ctx.out(tuple(d if r == 1 else d * r for d, r in zip(shape, repeats)))]


for _v in (6, 13):
    schema("Tile", since=_v, inputs=["input", Input("repeats", types=(np.int64,))], float_types=GRAPH_DATA_TYPES,
           outputs=["output"])(infer_tile)


@gradient("Tile", since=6, emits=("Reshape", "ReduceSum", "Shape", "Concat", "Gather"))
def tile_gradient(g):
    x_type, repeats_type = g.type_of(g.I(0)), g.type_of(g.I(1))
    if x_type is None or x_type.shape is None:
        raise GraphError(f"gradient of Tile (node {g.forward.name!r}): the input's rank must be known when the "
                         "gradient graph is built")
    rank = len(x_type.shape)
    unknown = sum(1 for d in x_type.shape if not isinstance(d, int))
    if repeats_type is not None and repeats_type.value is not None and unknown <= 1:
        interleaved = []
        for d, r in zip(x_type.shape, repeats_type.value):
            interleaved += [r, d if isinstance(d, int) else -1]
        target = g.constant(np.array(interleaved, dtype=np.int64), "interleaved")
    else:
        shape = g.node("Shape", [g.I(0)], [g.tmp("X_shape")])
        stacked = g.node("Concat", [g.I(1), shape], [g.tmp("repeats_and_shape")], {"axis": 0})
        order = g.constant(np.array([i + k * rank for i in range(rank) for k in (0, 1)], dtype=np.int64), "order")
        target = g.node("Gather", [stacked, order], [g.tmp("interleaved")], {"axis": 0})
    # a 0 in the target is a 0 (a repeat or dim of 0), not "copy the dim", where Reshape can say so
    rows = g.node("Reshape", [g.GO(0), target], [g.tmp("dY_interleaved")], {"allowzero": 1} if g.opset >= 14 else {})
    axes = list(range(0, 2 * rank, 2))
    if g.opset < 13:
        g.node("ReduceSum", [rows], [g.GI(0)], {"axes": axes, "keepdims": 0})
    else:
        g.node("ReduceSum", [rows, g.constant(np.array(axes, dtype=np.int64), "axes")], [g.GI(0)], {"keepdims": 0})
