"""Pooling ops: MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool, and their gradients.

Schemas follow ONNX's versions where the semantics change:
  MaxPool      1 (Y only), 8 (Indices output, storage_order), 10 (ceil_mode, dilations), 11, 12
  AveragePool  1, 7 (count_include_pad), 10 (ceil_mode), 11, 19 (dilations)
Indices (int64) are flattened over the whole N x C x spatial tensor, row-major
(storage_order 0) or with column-major spatial positions (storage_order 1); ties go to the
first maximum in row-major order and padding never wins.

Gradients, as ONNX Runtime builds them (both ops in the ONNX domain, version 9):
  MaxPool     -> MaxPoolGrad(dY, Indices) -> dX: scatter-add of dY at the indices.  The builder
                 makes the forward MaxPool produce Indices.
  AveragePool -> AveragePoolGrad(dY) -> dX: each dY spread evenly over its window, divided by
                 the window's count (with or without padding as count_include_pad says; windows
                 that overhang the padded input in ceil mode count only their part inside it,
                 as in PyTorch).
Both carry the forward node's attributes and take dX's shape from the graph (run_node's
`output_shapes={"dX": shape}`); without it they take the smallest input shape that pools to
dY's shape.  That is a guess whenever several sizes pool alike (floor mode with stride > 1:
sizes 4 and 5 both pool to 2 by kernel 2, stride 2), and then the dX of a larger forward input
comes back too small, its last rows missing: callers of run_node with such geometry must pass
output_shapes.  Graphs pass it from the forward input's type, which autodiff records.
Their builders exist from opset 9, where MaxPoolGrad/AveragePoolGrad start.

Global pooling gradients are two small com.microsoft ops of minitrain's own:
  GlobalAveragePool -> GlobalAveragePoolGrad(dY, shape) -> dX = dY / spatial size, broadcast;
                       `shape` is X's shape (a constant when known statically, else Shape(X)),
                       so X itself need not be kept alive.
  GlobalMaxPool     -> GlobalMaxPoolGrad(dY, X) -> dX = dY at the first maximum of each plane
                       (the element MaxPool with a whole-plane kernel would pick), 0 elsewhere.
"""
import numpy as np

from .gradients import gradient
from .pool_geometry import check_pool_attrs, input_sizes_for, output_spatial
from .schema import MS_DOMAIN, REQUIRED, Attr, Input, schema
from .shape_utils import shapes_differ

INDEX_TYPES = (np.int64,)

_BASE = {"auto_pad": Attr("string", "NOTSET"), "kernel_shape": Attr("ints", REQUIRED),
         "pads": Attr("ints"), "strides": Attr("ints")}
_STORAGE = {"storage_order": Attr("int", 0)}
_CEIL = {"ceil_mode": Attr("int", 0)}
_DILATIONS = {"dilations": Attr("ints")}
_COUNT_PAD = {"count_include_pad": Attr("int", 0)}

MAXPOOL_ATTRS = {
    1: dict(_BASE),
    8: {**_BASE, **_STORAGE},
    10: {**_BASE, **_STORAGE, **_CEIL, **_DILATIONS},
    11: {**_BASE, **_STORAGE, **_CEIL, **_DILATIONS},
    12: {**_BASE, **_STORAGE, **_CEIL, **_DILATIONS},
}
AVGPOOL_ATTRS = {
    1: dict(_BASE),
    7: {**_BASE, **_COUNT_PAD},
    10: {**_BASE, **_COUNT_PAD, **_CEIL},
    11: {**_BASE, **_COUNT_PAD, **_CEIL},
    19: {**_BASE, **_COUNT_PAD, **_CEIL, **_DILATIONS},
}
MAXPOOL_GRAD_ATTRS = MAXPOOL_ATTRS[12]
AVGPOOL_GRAD_ATTRS = AVGPOOL_ATTRS[19]


def _fail(ctx):
    return lambda message, error: ctx.fail(message, error)


def check_pool_input(ctx, i, what):
    """Shape of input i, which must be (N, C, spatial...) with 1 to 3 spatial axes."""
    shape = ctx.shape(i)
    if shape is not None and not 3 <= len(shape) <= 5:
        ctx.fail(f"input {what!r} has shape {tuple(shape)}; pooling needs (N, C, D1[, D2[, D3]]) "
                 "with 1 to 3 spatial axes")
    return shape


def pooled_shape(ctx, shape, what="input 'X'"):
    """(N, C, out...) of pooling `shape`, None when a spatial size is symbolic."""
    if shape is None or not all(isinstance(d, int) for d in shape[2:]):
        if shape is not None:   # still validate what does not depend on the sizes
            check_pool_attrs(ctx.attrs, len(shape) - 2, _fail(ctx))
        return None
    return tuple(shape[:2]) + output_spatial(ctx.attrs, shape[2:], _fail(ctx), what)


def infer_pool(ctx):
    shape = check_pool_input(ctx, 0, "X")
    out = pooled_shape(ctx, shape)
    results = [ctx.out(out)]
    if len(ctx.schema.outputs) > 1:
        results.append(ctx.out(out, np.int64))
    return results


for _v, _attrs in MAXPOOL_ATTRS.items():
    schema("MaxPool", since=_v, inputs=["X"], outputs=["Y"] if _v < 8 else ["Y", "Indices"],
           attrs=_attrs, optional_outputs=() if _v < 8 else ("Indices",))(infer_pool)
for _v, _attrs in AVGPOOL_ATTRS.items():
    schema("AveragePool", since=_v, inputs=["X"], attrs=_attrs)(infer_pool)


def infer_pool_grad(ctx):
    """dX: (N, C, smallest input sizes) when those are the only consistent ones; otherwise
    unknown here (the graph declares it, autodiff records the forward input's type)."""
    shape = check_pool_input(ctx, 0, "dY")
    if ctx.schema.op_type == "MaxPoolGrad":
        ind = ctx.shape(1)
        if shapes_differ(ind, shape):
            ctx.fail(f"input 'Indices' has shape {tuple(ind)}; it must match input 'dY' {tuple(shape)}")
    if shape is None or not all(isinstance(d, int) for d in shape[2:]):
        return [ctx.out(None)]
    sizes = input_sizes_for(ctx.attrs, shape[2:], _fail(ctx))
    if not all(unique for _, unique in sizes):
        return [ctx.out(None)]
    return [ctx.out(tuple(shape[:2]) + tuple(s for s, _ in sizes))]


schema("MaxPoolGrad", since=9, inputs=["dY", Input("Indices", types=INDEX_TYPES)], outputs=["dX"],
       attrs=MAXPOOL_GRAD_ATTRS)(infer_pool_grad)
schema("AveragePoolGrad", since=9, inputs=["dY"], outputs=["dX"], attrs=AVGPOOL_GRAD_ATTRS)(infer_pool_grad)


@gradient("MaxPool", since=9, emits=("MaxPoolGrad",))
def max_pool_gradient(g):
    g.node("MaxPoolGrad", [g.GO(0), g.O(1)], [g.GI(0)], g.attrs)


@gradient("AveragePool", since=9, emits=("AveragePoolGrad",))
def average_pool_gradient(g):
    g.node("AveragePoolGrad", [g.GO(0)], [g.GI(0)], g.attrs)


# --------------------------------------------------------------------------- global pooling
def infer_global_pool(ctx):
    shape = check_pool_input(ctx, 0, "X")
    if shape is None:
        return [ctx.out(None)]
    for i, d in enumerate(shape[2:]):
        if isinstance(d, int) and d < 1:
            ctx.fail(f"input 'X' {tuple(shape)} has an empty spatial axis {i}")
    return [ctx.out(tuple(shape[:2]) + (1,) * (len(shape) - 2))]


schema("GlobalAveragePool", since=1, inputs=["X"])(infer_global_pool)
schema("GlobalMaxPool", since=1, inputs=["X"])(infer_global_pool)


def _check_global_dy(ctx, dy, x):
    if dy is None or x is None:
        return
    expected = tuple(x[:2]) + (1,) * (len(x) - 2)
    if shapes_differ(dy, expected):
        ctx.fail(f"input 'dY' has shape {tuple(dy)}; global pooling of input 'X' {tuple(x)} gives {expected}")


@schema("GlobalAveragePoolGrad", domain=MS_DOMAIN, inputs=["dY", Input("shape", types=INDEX_TYPES)],
        outputs=["dX"])
def infer_global_average_pool_grad(ctx):
    """dX has the shape given by the int64 input `shape` (X's shape)."""
    check_pool_input(ctx, 0, "dY")
    ctx.require_rank(1, 1)
    value = ctx.input(1).value
    if value is not None:
        check_global_grad_shape(ctx, ctx.shape(0), value)
    return [ctx.out(value)]


def check_global_grad_shape(ctx, dy, shape):
    """Fail unless `shape`, GlobalAveragePoolGrad's input, is a pooling input shape (N, C,
    D1[, D2[, D3]]: no negative dim, no empty spatial axis) that global pooling takes to dY's
    shape; `ctx` is an inference or a kernel context."""
    if not 3 <= len(shape) <= 5 or any(d < 0 for d in shape[:2]) or any(d < 1 for d in shape[2:]):
        ctx.fail(f"input 'shape' {tuple(shape)} is not a pooling input shape (N, C, D1[, D2[, D3]]) with "
                 "non-empty spatial axes")
    _check_global_dy(ctx, dy, shape)


@schema("GlobalMaxPoolGrad", domain=MS_DOMAIN, inputs=["dY", "X"], outputs=["dX"])
def infer_global_max_pool_grad(ctx):
    x = check_pool_input(ctx, 1, "X")
    check_pool_input(ctx, 0, "dY")
    _check_global_dy(ctx, ctx.shape(0), x)
    return [ctx.out(x)]


@gradient("GlobalAveragePool", since=1, emits=("GlobalAveragePoolGrad", "Shape"))
def global_average_pool_gradient(g):
    g.node("GlobalAveragePoolGrad", [g.GO(0), g.shape_of(g.I(0))], [g.GI(0)], domain=MS_DOMAIN)


@gradient("GlobalMaxPool", since=1, emits=("GlobalMaxPoolGrad",))
def global_max_pool_gradient(g):
    g.node("GlobalMaxPoolGrad", [g.GO(0), g.I(0)], [g.GI(0)], domain=MS_DOMAIN)
