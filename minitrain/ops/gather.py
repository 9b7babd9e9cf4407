"""Gather and its gradient GatherGrad (com.microsoft), as ONNX Runtime builds it.

Gather picks the entries `indices` names along `axis` of `data`: the output's shape is data's
with that dim replaced by the indices' shape.  An index counts from the end when negative
(in [-n, n), from opset 11; minitrain accepts negative indices at every version, as ONNX
Runtime does).  Data may be a float or an integer tensor (shape arithmetic gathers dims).

GatherGrad (shape, indices, dY -> dX) sums dY's entries into zeros of the data's shape at the
gathered positions: an index named twice receives both.
"""
import numpy as np

from .gradients import gradient
from .schema import GRAPH_DATA_TYPES, MS_DOMAIN, Attr, Input, schema
from .shape_utils import kernel_axis, normalize_axis

INDICES = (np.int64, np.int32)


def gathered_shape(data_shape, indices_shape, axis):
    return tuple(data_shape[:axis]) + tuple(indices_shape) + tuple(data_shape[axis + 1:])


def check_indices(fail, indices, dim):
    """The indices as non-negative int64; `fail` names the first one out of [-dim, dim)."""
    index = np.asarray(indices, dtype=np.int64)
    bad = (index < -dim) | (index >= dim)
    if bad.any():
        fail(f"input 'indices' holds {int(index[bad].reshape(-1)[0])}, out of range for a dim of {dim}: "
             f"expected [{-dim}, {dim - 1}]")
    return np.where(index < 0, index + dim, index)


def gather_plan(fail, axis, data_shape, indices):
    """(axis, index) of a Gather kernel: the axis checked against the data, the indices made
    non-negative int64."""
    if len(data_shape) == 0:
        fail("input 'data' is 0-d; Gather needs an axis")
    axis = kernel_axis(fail, axis, len(data_shape))
    return axis, check_indices(fail, indices, data_shape[axis])


def gather_grad_plan(fail, axis, shape, indices, dy_shape):
    """(shape, axis, index) of a GatherGrad kernel: the data's shape (from the `shape` input)
    as ints, its axis, the indices made non-negative, dY's shape checked as their gather."""
    shape = tuple(int(d) for d in np.asarray(shape).reshape(-1))
    if not shape or any(d < 0 for d in shape):
        fail(f"input 'shape' {shape} is not the shape of a Gather's data")
    axis = kernel_axis(fail, axis, len(shape))
    index = check_indices(fail, indices, shape[axis])
    expected = gathered_shape(shape, index.shape, axis)
    if tuple(dy_shape) != expected:
        fail(f"input 'dY' has shape {tuple(dy_shape)}; expected {expected} (the gather of data of shape {shape})")
    return shape, axis, index


def infer_gather(ctx):
    data, indices = ctx.shape(0), ctx.shape(1)
    if data is None or indices is None:
        return [ctx.out(None)]
    if len(data) == 0:
        ctx.fail("input 'data' is 0-d; Gather needs an axis")
    axis = normalize_axis(ctx, ctx.attrs["axis"], len(data))
    values, index = ctx.input(0).value, ctx.input(1).value
    value = None
    if values is not None and index is not None:
        value = tuple(values[int(i)] for i in check_indices(ctx.fail, index, len(values)))
    return [ctx.out(gathered_shape(data, indices, axis), value=value)]


for _v in (1, 11, 13):
    schema("Gather", since=_v, inputs=["data", Input("indices", types=INDICES)], outputs=["output"],
           attrs={"axis": Attr("int", 0)}, float_types=GRAPH_DATA_TYPES)(infer_gather)


@schema("GatherGrad", domain=MS_DOMAIN, inputs=[Input("shape", types=(np.int64,)), Input("indices", types=INDICES),
                                                  "dY"], outputs=["dX"], attrs={"axis": Attr("int", 0)})
def infer_gather_grad(ctx):
    """dX has the data's shape (the `shape` input); dY the gathered shape."""
    ctx.require_rank(0, 1)
    shape = ctx.input(0).value
    if shape is None:
        return [ctx.out(None)]
    if len(shape) == 0:
        ctx.fail("input 'shape' is empty: the data of a Gather has an axis")
    axis = normalize_axis(ctx, ctx.attrs["axis"], len(shape))
    if ctx.shape(1) is not None:
        ctx.require_shape(2, gathered_shape(shape, ctx.shape(1), axis), f"the gather of data of shape {shape}")
    return [ctx.out(shape)]


@gradient("Gather", since=1, emits=("Shape", "GatherGrad"))
def gather_gradient(g):
    g.node("GatherGrad", [g.shape_of(g.I(0)), g.I(1), g.GO(0)], [g.GI(0)], {"axis": g.attrs.get("axis", 0)}, domain=MS_DOMAIN)
