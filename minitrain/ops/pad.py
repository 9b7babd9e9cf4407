"""Pad: the input widened by `pads` (begin..., end...; negative values crop) along each axis,
the new entries a constant (`mode` constant, the default), the input reflected about its edge
entries (reflect), the edge entries repeated (edge), or, from opset 19, the input repeated
(wrap).  Opset 2 takes pads and the constant as attributes; from 11 they are inputs (pads an
int64 tensor read from host memory, constant_value an optional scalar), and from 18 an optional
`axes` input names the axes the pads apply to.

Gradients: in constant mode with constant pads, ONNX Runtime's: Pad of dY by the negated pads
(a crop).  Otherwise PadGrad (com.microsoft; dY, pads, axes? -> dX), which folds every padded
position of dY back onto the input position it was copied from.
"""
import numpy as np

from .gradients import gradient
from .schema import GRAPH_DATA_TYPES, MS_DOMAIN, Attr, Input, schema

MODES = ("constant", "reflect", "edge")
WRAP_MODES = MODES + ("wrap",)
INDEX = (np.int64,)


def full_pads(fail, rank, pads, axes=None):
    """[(begin, end)] for each of `rank` axes from `pads` (begin..., end...) over `axes` (every
    axis when None); `fail` names a length mismatch or an axis out of range or repeated."""
    pads = [int(p) for p in pads]
    axes = list(range(rank)) if axes is None else [int(a) for a in axes]
    if len(pads) != 2 * len(axes):
        fail(f"pads {tuple(pads)} have {len(pads)} entries; expected {2 * len(axes)} (begin and end of "
             f"{len(axes)} axes)")
    bad = [a for a in axes if not -rank <= a < rank]
    if bad:
        fail(f"axes {tuple(axes)} hold {bad[0]}, out of range for an input of rank {rank}")
    normal = [a + rank if a < 0 else a for a in axes]
    if len(set(normal)) != len(normal):
        fail(f"axes {tuple(axes)} name an axis twice")
    result = [(0, 0)] * rank
    for k, a in enumerate(normal):
        result[a] = (pads[k], pads[k + len(axes)])
    return result


def padded_shape(fail, shape, pairs, mode):
    """The output's shape; `fail` names a dim that would become negative, or an empty dim that
    a mode other than constant cannot pad."""
    out = []
    for axis, (d, (begin, end)) in enumerate(zip(shape, pairs)):
        if not isinstance(d, int):
            out.append(d if begin == end == 0 else None)
            continue
        if d + begin + end < 0:
            fail(f"pads ({begin}, {end}) of axis {axis} crop more than its {d} entries")
        if d == 0 and mode != "constant" and (begin > 0 or end > 0):
            fail(f"mode {mode!r} cannot pad axis {axis}, which is empty")
        out.append(d + begin + end)
    return None if None in out else tuple(out)


def source_positions(mode, size, begin, length):
    """For each of the `length` output positions along an axis, the input position it copies
    (-1: the constant), for an input of `size` entries padded by `begin` in front."""
    p = np.arange(length, dtype=np.int64) - begin
    if mode == "constant":
        return np.where((p >= 0) & (p < size), p, -1)
    if mode == "edge":
        return np.clip(p, 0, size - 1)
    if mode == "wrap":
        return np.mod(p, size)
    if size == 1:
        return np.zeros(length, dtype=np.int64)
    period = 2 * (size - 1)
    q = np.mod(p, period)
    return np.where(q < size, q, period - q)


def _ints(value):
    return None if value is None else [int(v) for v in value.reshape(-1)]


def pad_arguments(ctx, modes):
    """(mode, [(begin, end)] per axis, output shape, constant value) of a Pad kernel's node: pads
    and value from the attributes (Pad-2) or from the host inputs pads, constant_value and axes
    (Pad-11 on); `ctx.fail` names a mode outside `modes` or a bad pad."""
    x, mode = ctx.inputs[0], ctx.attrs["mode"]
    if mode not in modes:
        ctx.fail(f"attribute 'mode'={mode!r} is not one of {list(modes)}")
    if "pads" in ctx.attrs:
        if ctx.attrs["pads"] is None:
            ctx.fail("attribute 'pads' is required")
        pads, axes, value = ctx.attrs["pads"], None, ctx.attrs["value"]
    else:
        inputs = list(ctx.inputs) + [None] * (4 - len(ctx.inputs))
        if inputs[2] is not None and inputs[2].size != 1:
            ctx.fail(f"input 'constant_value' has shape {inputs[2].shape}; expected one number")
        pads, axes = _ints(inputs[1]), _ints(inputs[3])
        value = 0 if inputs[2] is None else inputs[2].reshape(())
    pairs = full_pads(ctx.fail, x.ndim, pads, axes)
    return mode, pairs, padded_shape(ctx.fail, x.shape, pairs, mode), value


def pad_grad_axes(ctx):
    """[(axis, begin, size)] of each padded axis of a PadGrad kernel's node, `size` the forward
    input's dim; `ctx.fail` names a dY too narrow for its pads."""
    dy, mode = ctx.inputs[0], ctx.attrs["mode"]
    axes = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    folds = []
    for axis, (begin, end) in enumerate(full_pads(ctx.fail, dy.ndim, _ints(ctx.inputs[1]), _ints(axes))):
        if begin == end == 0:
            continue
        size = dy.shape[axis] - begin - end
        if size < 0 or size == 0 and mode != "constant":
            ctx.fail(f"input 'dY' of shape {dy.shape} is too narrow for the pads ({begin}, {end}) of axis {axis} "
                     f"in mode {mode!r}")
        folds.append((axis, begin, size))
    return folds


def _pads_and_axes(ctx):
    """The pads and axes as known at inference (False when the pads are not constant)."""
    if ctx.schema.since_version < 11:
        return ctx.attrs["pads"], None
    ctx.require_rank(1, 1)
    pads = ctx.input(1).value
    axes_type = ctx.input(3)
    if axes_type is not None:
        ctx.require_rank(3, 1)
        if axes_type.value is None:
            return False
    if pads is None:
        return False
    return pads, None if axes_type is None else axes_type.value


def infer_pad(ctx):
    mode = ctx.attrs["mode"]
    modes = WRAP_MODES if ctx.schema.since_version >= 19 else MODES
    if mode not in modes:
        ctx.attr_fail("mode", f"is not one of {list(modes)}")
    if ctx.schema.since_version >= 11:
        ctx.require_scalar(2, "the constant padding value")
    known = _pads_and_axes(ctx)
    shape = ctx.shape(0)
    if shape is None or known is False:
        return [ctx.out(None)]
    pairs = full_pads(ctx.fail, len(shape), *known)
    return [ctx.out(padded_shape(ctx.fail, shape, pairs, mode))]


schema("Pad", since=2, inputs=["data"], outputs=["output"], float_types=GRAPH_DATA_TYPES,
       attrs={"pads": Attr("ints"), "mode": Attr("string", "constant"), "value": Attr("float", 0.0)})(infer_pad)
for _v in (11, 13, 18, 19):
    _inputs = ["data", Input("pads", types=INDEX), Input("constant_value", optional=True)]
    if _v >= 18:
        _inputs.append(Input("axes", types=(np.int64, np.int32), optional=True))
    schema("Pad", since=_v, inputs=_inputs, outputs=["output"], float_types=GRAPH_DATA_TYPES,
           attrs={"mode": Attr("string", "constant")})(infer_pad)


@schema("PadGrad", domain=MS_DOMAIN, inputs=["dY", Input("pads", types=INDEX),
                                             Input("axes", types=(np.int64, np.int32), optional=True)],
        outputs=["dX"], attrs={"mode": Attr("string", "constant")})
def infer_pad_grad(ctx):
    """dX has the forward input's shape: dY's less the pads."""
    if ctx.attrs["mode"] not in WRAP_MODES:
        ctx.attr_fail("mode", f"is not one of {list(WRAP_MODES)}")
    ctx.require_rank(1, 1)
    shape, pads = ctx.shape(0), ctx.input(1).value
    axes = ctx.input(2)
    if shape is None or pads is None or (axes is not None and axes.value is None):
        return [ctx.out(None)]
    pairs = full_pads(ctx.fail, len(shape), pads, None if axes is None else axes.value)
    dims = [d - b - e if isinstance(d, int) else (d if b == e == 0 else None) for d, (b, e) in zip(shape, pairs)]
    if any(isinstance(d, int) and d < 0 for d in dims):
        ctx.fail(f"input 'dY' of shape {tuple(shape)} is narrower than the pads {tuple(pads)}")
    return [ctx.out(None if None in dims else dims)]


@gradient("Pad", since=2, emits=("Pad", "PadGrad"))
def pad_gradient(g):
    mode = g.attrs.get("mode", "constant")
    if g.opset < 11:
        pads = g.attrs["pads"]
        if mode == "constant":
            g.node("Pad", [g.GO(0)], [g.GI(0)], {"pads": [-p for p in pads]})
        else:
            g.node("PadGrad", [g.GO(0), g.constant(np.array(pads, dtype=np.int64), "pads")], [g.GI(0)],
                   {"mode": mode}, domain=MS_DOMAIN)
        return
    axes = [g.I(3)] if len(g.forward.inputs) > 3 and g.I(3) else []
    pads_type = g.type_of(g.I(1))
    if mode == "constant" and pads_type is not None and pads_type.value is not None:
        negated = g.constant(np.array([-p for p in pads_type.value], dtype=np.int64), "negated_pads")
        g.node("Pad", [g.GO(0), negated, ""] + axes, [g.GI(0)])
        return
    g.node("PadGrad", [g.GO(0), g.I(1)] + axes, [g.GI(0)], {"mode": mode}, domain=MS_DOMAIN)
