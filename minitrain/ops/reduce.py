"""ReduceSum (ONNX 1, 11, 13): the sum over `axes`, each kept as a dim of 1 with keepdims.

Up to opset 12 the axes are an attribute; from 13 they are an optional int64 input (read from
host memory), and noop_with_empty_axes=1 makes absent or empty axes the identity instead of a
sum over every axis.  ONNX Runtime's gradient graphs use it for Gemm's bias gradient."""
import numpy as np

from .schema import Attr, Input, schema

REDUCE_ATTRS = {"keepdims": Attr("int", 1)}


def reduced_axes(fail, rank, axes, noop_with_empty_axes=0):
    """The sorted, non-negative axes to reduce (None: none, the identity); `fail(message)`
    raises naming the op when an axis is out of [-rank, rank) or repeated."""
    if axes is None or len(axes) == 0:
        return None if noop_with_empty_axes else tuple(range(rank))
    bad = [a for a in axes if not -rank <= a < rank]
    if bad:
        fail(f"axes {tuple(axes)} hold {bad[0]}, out of range for an input of rank {rank}: expected "
             f"[{-rank}, {rank - 1}]")
    normal = sorted(a + rank if a < 0 else a for a in axes)
    if len(set(normal)) != len(normal):
        fail(f"axes {tuple(axes)} name an axis twice")
    return tuple(normal)


def reduced_shape(shape, axes, keepdims):
    if axes is None:
        return tuple(shape)
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def infer_reduce_sum(ctx):
    """Y: X's shape with the reduced axes made 1 (keepdims) or dropped.  From opset 13 the
    shape is known when the axes input is absent or a constant."""
    shape = ctx.shape(0)
    if ctx.schema.since_version < 13:
        axes, noop = ctx.attrs["axes"], 0
    else:
        ctx.require_rank(1, 1)
        axes_type, noop = ctx.input(1), ctx.attrs["noop_with_empty_axes"]
        if axes_type is not None and axes_type.value is None:
            return [ctx.out(None)]
        axes = None if axes_type is None else axes_type.value
    if shape is None:
        return [ctx.out(None)]
    return [ctx.out(reduced_shape(shape, reduced_axes(ctx.fail, len(shape), axes, noop), ctx.attrs["keepdims"]))]


for _v in (1, 11):
    schema("ReduceSum", since=_v, inputs=["data"], outputs=["reduced"],
           attrs={**REDUCE_ATTRS, "axes": Attr("ints")})(infer_reduce_sum)
schema("ReduceSum", since=13, inputs=["data", Input("axes", types=(np.int64,), optional=True)],
       outputs=["reduced"], attrs={**REDUCE_ATTRS, "noop_with_empty_axes": Attr("int", 0)})(infer_reduce_sum)
