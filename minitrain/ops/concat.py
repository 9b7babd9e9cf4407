"""Concat and Split, each the other's gradient (as ONNX Runtime builds them).

Concat joins its inputs along `axis` (negative from opset 11).  Split cuts its input along
`axis` into pieces of the sizes `split` gives (an attribute up to opset 12, an int64 input from
13), or into equal pieces: as many as the node has outputs, or `num_outputs` from opset 18
(the last piece then smaller when the dim does not divide).  Both also move int64 tensors:
shape arithmetic is made of them.

Split's outputs are variadic; the schema names MAX_PIECES of them ("outputs_0", ...), and a
node uses the first ones.  Without `split` and `num_outputs`, the pieces are counted from the
outputs asked for.
"""
import numpy as np

from ..errors import GraphError
from .gradients import gradient
from .schema import GRAPH_DATA_TYPES, REQUIRED, Attr, Input, schema
from .shape_utils import kernel_axis, normalize_axis

MAX_PIECES = 64
PIECES = tuple(f"outputs_{i}" for i in range(MAX_PIECES))


def infer_concat(ctx):
    shapes = [t.shape for t in ctx.input_types]
    if any(s is None for s in shapes):
        return [ctx.out(None)]
    rank = len(shapes[0])
    if rank == 0:
        ctx.fail("inputs are 0-d; Concat needs at least one axis")
    if any(len(s) != rank for s in shapes):
        ctx.fail(f"inputs have different ranks: {[tuple(s) for s in shapes]}")
    axis = normalize_axis(ctx, ctx.attrs["axis"], rank)
    out = list(shapes[0])
    for s in shapes[1:]:
        for d in range(rank):
            if d == axis:
                continue
            if isinstance(out[d], int) and isinstance(s[d], int) and out[d] != s[d]:
                ctx.fail(f"inputs {[tuple(s) for s in shapes]} differ in dim {d}, which is not the axis {axis}")
    sizes = [s[axis] for s in shapes]
    out[axis] = sum(sizes) if all(isinstance(d, int) for d in sizes) else None
    if out[axis] is None:
        return [ctx.out(None)]
    values = [t.value for t in ctx.input_types]
    value = sum(values, ()) if rank == 1 and all(v is not None for v in values) else None
    return [ctx.out(out, value=value)]


schema("Concat", since=1, inputs=[Input("inputs", variadic=True)], outputs=["concat_result"],
       attrs={"axis": Attr("int", 1)}, float_types=GRAPH_DATA_TYPES)(infer_concat)
for _v in (4, 11, 13):
    schema("Concat", since=_v, inputs=[Input("inputs", variadic=True)], outputs=["concat_result"],
           attrs={"axis": Attr("int", REQUIRED)}, float_types=GRAPH_DATA_TYPES)(infer_concat)


def axis_dims(g, names, axis):
    """The static sizes along `axis` of the forward values `names`, or None where one is unknown."""
    sizes = []
    for name in names:
        t = g.type_of(name)
        if t is None or t.shape is None:
            return None
        d = t.shape[axis + len(t.shape) if axis < 0 else axis]
        if not isinstance(d, int):
            return None
        sizes.append(d)
    return sizes


@gradient("Concat", since=4, differentiable=None, emits=("Split", "Shape", "Gather", "Concat"))
def concat_gradient(g):
    """dY split back into the inputs' sizes along the axis: a constant split when the sizes are
    known, else gathered from the inputs' shapes (Shape -> Gather -> Concat)."""
    axis = g.attrs["axis"]
    inputs = list(g.forward.inputs)
    sizes = axis_dims(g, inputs, axis)
    outputs = [g.GI(i) for i in range(len(inputs))]
    if g.opset < 13:
        if sizes is None:
            raise GraphError(f"gradient of Concat (node {g.forward.name!r}) at opset {g.opset}: the inputs' sizes "
                             "along the axis must be known, since Split takes them as an attribute there")
        g.node("Split", [g.GO(0)], outputs, {"axis": axis, "split": sizes})
        return
    if sizes is not None:
        split = g.constant(np.array(sizes, dtype=np.int64), "split")
    else:
        index = g.constant(np.array([axis], dtype=np.int64), "axis")
        dims = []
        for i, name in enumerate(inputs):
            shape = g.node("Shape", [name], [g.tmp(f"shape{i}")])
            dims.append(g.node("Gather", [shape, index], [g.tmp(f"size{i}")], {"axis": 0}))
        split = g.node("Concat", dims, [g.tmp("split")], {"axis": 0})
    g.node("Split", [g.GO(0), split], outputs, {"axis": axis})


def split_sizes(fail, dim, split, pieces, uneven=False):
    """The sizes of the pieces: `split` when given (they must add up to `dim`), else `pieces`
    equal pieces; `uneven` (opset 18's num_outputs) lets them be ceil(dim / pieces), the last
    one what is left."""
    if split is not None:
        if any(s < 0 for s in split):
            fail(f"split {tuple(split)} holds a negative size")
        if sum(split) != dim:
            fail(f"split {tuple(split)} adds up to {sum(split)}, not to the dim {dim} along the axis")
        return list(split)
    if pieces < 1:
        fail(f"cannot split into {pieces} pieces")
    if pieces > MAX_PIECES:
        fail(f"splits into {pieces} pieces; at most {MAX_PIECES} are supported")
    if not uneven and dim % pieces:
        fail(f"cannot split a dim of {dim} into {pieces} equal pieces (uneven pieces need opset 18's "
             "num_outputs, or the sizes in 'split')")
    size = -(-dim // pieces)
    sizes = [min(size, max(dim - i * size, 0)) for i in range(pieces)]
    if sizes[-1] == 0 and dim >= pieces:
        fail(f"cannot split a dim of {dim} into {pieces} pieces of {size}")
    return sizes


def split_count(schema_version, attrs, split, wanted):
    """How many pieces a Split node makes: len(split), num_outputs, or the outputs asked for."""
    if split is not None:
        return len(split)
    if counted_by_num_outputs(schema_version, attrs):
        return attrs["num_outputs"]
    return max(PIECES.index(w) for w in wanted) + 1


def counted_by_num_outputs(schema_version, attrs):
    """Whether the Split's pieces are counted by opset 18's num_outputs (the last may be smaller)."""
    return schema_version >= 18 and attrs.get("num_outputs") is not None


def concat_axis(fail, axis, shapes):
    """The axis a Concat kernel joins the input `shapes` along, checked: one rank of at least
    1, and the same dims off the axis."""
    rank = len(shapes[0])
    if rank == 0 or any(len(s) != rank for s in shapes):
        fail(f"inputs have shapes {[tuple(s) for s in shapes]}; they need one rank of at least 1")
    axis = kernel_axis(fail, axis, rank)
    off_axis = [tuple(s[:axis]) + tuple(s[axis + 1:]) for s in shapes]
    if any(o != off_axis[0] for o in off_axis):
        fail(f"inputs {[tuple(s) for s in shapes]} differ in a dim other than the axis {axis}")
    return axis


def split_plan(fail, version, attrs, shape, split, wanted):
    """(axis, sizes) of a Split kernel of this schema version cutting an input of `shape`
    (`split` the sizes given, or None) for the outputs `wanted`."""
    if len(shape) == 0:
        fail("input is 0-d; Split needs an axis")
    axis = kernel_axis(fail, attrs["axis"], len(shape))
    count = split_count(version, attrs, split, wanted)
    beyond = [w for w in wanted if PIECES.index(w) >= count]
    if beyond:
        fail(f"makes {count} pieces; output {beyond[0]!r} is beyond them")
    return axis, split_sizes(fail, shape[axis], split, count, counted_by_num_outputs(version, attrs))


def infer_split(ctx):
    shape = ctx.shape(0)
    if ctx.schema.since_version >= 13:
        split_type = ctx.input(1)
        if split_type is not None:
            ctx.require_rank(1, 1)
        if split_type is not None and split_type.value is None:
            split, known = None, False
        else:
            split, known = (None if split_type is None else split_type.value), True
    else:
        split, known = ctx.attrs["split"], True
    if ctx.schema.since_version >= 18 and ctx.attrs.get("num_outputs") is not None and ctx.input(1) is not None:
        ctx.fail("takes either the input 'split' or the attribute 'num_outputs', not both")
    count = split_count(ctx.schema.since_version, ctx.attrs, split, ctx.wanted_outputs) if known else None
    if count is not None:
        beyond = [w for w in ctx.wanted_outputs if PIECES.index(w) >= count]
        if beyond:
            ctx.fail(f"makes {count} pieces; output {beyond[0]!r} is beyond them")
    if shape is None or not known:
        return [ctx.out(None)] * (count or len(ctx.wanted_outputs))
    if len(shape) == 0:
        ctx.fail("input is 0-d; Split needs an axis")
    axis = normalize_axis(ctx, ctx.attrs["axis"], len(shape))
    if not isinstance(shape[axis], int):
        return [ctx.out(None)] * count
    sizes = split_sizes(ctx.fail, shape[axis], split, count,
                        counted_by_num_outputs(ctx.schema.since_version, ctx.attrs))
    return [ctx.out(shape[:axis] + (s,) + shape[axis + 1:]) for s in sizes]


for _v in (2, 11):
    schema("Split", since=_v, inputs=["input"], outputs=PIECES, optional_outputs=PIECES[1:],
           attrs={"axis": Attr("int", 0), "split": Attr("ints")}, float_types=GRAPH_DATA_TYPES)(infer_split)
schema("Split", since=13, inputs=["input", Input("split", types=(np.int64,), optional=True)], outputs=PIECES,
       optional_outputs=PIECES[1:], attrs={"axis": Attr("int", 0)}, float_types=GRAPH_DATA_TYPES)(infer_split)
schema("Split", since=18, inputs=["input", Input("split", types=(np.int64,), optional=True)], outputs=PIECES,
       optional_outputs=PIECES[1:], attrs={"axis": Attr("int", 0), "num_outputs": Attr("int")},
       float_types=GRAPH_DATA_TYPES)(infer_split)


def piece_count(g):
    """How many pieces the forward Split node makes, as the gradient graph is built."""
    split = g.attrs.get("split") if g.opset < 13 else None
    if g.opset >= 13 and len(g.forward.inputs) > 1 and g.I(1):
        shape = g.type_of(g.I(1)).shape
        if shape is None or not isinstance(shape[0], int):
            raise GraphError(f"gradient of Split (node {g.forward.name!r}): the number of pieces (the length of "
                             "input 'split') must be known when the gradient graph is built")
        return shape[0]
    named = [i for i, out in enumerate(g.forward.outputs) if out]
    return split_count(g.opset, g.attrs, split, [PIECES[named[-1]]])


@gradient("Split", since=2, emits=("Concat", "Shape", "ConstantOfShape"))
def split_gradient(g):
    """The pieces' gradients concatenated back; a piece without one contributes zeros."""
    count = piece_count(g)
    parts = []
    for i in range(count):
        if g.GO(i):
            parts.append(g.GO(i))
            continue
        out = g.O(i)
        t = g.type_of(out)
        if t is not None and t.is_concrete:
            parts.append(g.constant(np.zeros(t.shape, t.dtype), f"zeros{i}"))
        else:
            dtype = g.type_of(g.I(0)).dtype
            shape = g.node("Shape", [out], [g.tmp(f"shape{i}")])
            parts.append(g.node("ConstantOfShape", [shape], [g.tmp(f"zeros{i}")],
                                {"value": np.zeros(1, dtype)}))
    g.node("Concat", parts, [g.GI(0)], {"axis": g.attrs.get("axis", 0)})
