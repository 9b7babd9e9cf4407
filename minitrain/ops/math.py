"""Gemm and MatMul, with their gradients expressed as Gemm/MatMul nodes."""
import numpy as np

from ..errors import GraphError
from .elementwise import reduce_to_input
from .gradients import gradient
from .schema import Attr, Input, schema
from .shape_utils import broadcast_shapes, dims_differ

GEMM_ATTRS = {"transA": Attr("int", 0), "transB": Attr("int", 0),
              "alpha": Attr("float", 1.0), "beta": Attr("float", 1.0)}


def infer_gemm(ctx):
    """Y = alpha * op(A) @ op(B) + beta * C, op transposing when transA/transB is set."""
    for flag in ("transA", "transB"):
        if ctx.attrs[flag] not in (0, 1):
            ctx.attr_fail(flag, "must be 0 or 1")
    ctx.require_rank(0, 2)
    ctx.require_rank(1, 2)
    a, b = ctx.shape(0), ctx.shape(1)
    if a is None or b is None:
        return [ctx.out(None)]
    m, k = (a[1], a[0]) if ctx.attrs["transA"] else a
    k2, n = (b[1], b[0]) if ctx.attrs["transB"] else b
    if dims_differ(k, k2):
        ctx.fail(f"inner dimensions differ: A {tuple(a)} (transA={ctx.attrs['transA']}) and "
                 f"B {tuple(b)} (transB={ctx.attrs['transB']})")
    c = ctx.shape(2)
    if c is not None and not broadcasts_to(c, (m, n)):
        ctx.fail(f"input 'C' {tuple(c)} must be unidirectionally broadcastable to Y {(m, n)}: each of its "
                 "dims 1 or Y's")
    return [ctx.out((m, n))]


def broadcasts_to(shape, target):
    """Whether `shape` broadcasts to `target` without changing it (ONNX's unidirectional
    broadcasting): at most target's rank, each dim 1 or target's (symbolic dims match anything)."""
    lead = len(target) - len(shape)
    return lead >= 0 and all(d == 1 or not dims_differ(d, t) for d, t in zip(shape, target[lead:]))


# C is optional from opset 11; opset 9 requires it
schema("Gemm", since=9, inputs=["A", "B", "C"], attrs=GEMM_ATTRS)(infer_gemm)
for _v in (11, 13):
    schema("Gemm", since=_v, inputs=["A", "B", Input("C", optional=True)], attrs=GEMM_ATTRS)(infer_gemm)


@schema("MatMul", since=13, inputs=["A", "B"])
def infer_matmul(ctx):
    """numpy.matmul semantics: batch dims broadcast, 1-D operands are promoted and squeezed."""
    a, b = ctx.shape(0), ctx.shape(1)
    if a is None or b is None:
        return [ctx.out(None)]
    if len(a) == 0 or len(b) == 0:
        ctx.fail(f"MatMul needs operands of rank >= 1, got {tuple(a)} and {tuple(b)}")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    if dims_differ(a2[-1], b2[-2]):
        ctx.fail(f"inner dimensions differ: A {tuple(a)} and B {tuple(b)}")
    batch = broadcast_shapes(ctx, [a2[:-2], b2[:-2]])
    out = tuple(batch) + ((a2[-2],) if len(a) > 1 else ()) + ((b2[-1],) if len(b) > 1 else ())
    return [ctx.out(out)]


@gradient("Gemm", since=9, differentiable=(0, 1, 2), emits=("Gemm", "Identity", "Shape", "SumToShape", "Mul"))
def gemm_gradient(g):
    ta, tb = g.attrs.get("transA", 0), g.attrs.get("transB", 0)
    alpha, beta = g.attrs.get("alpha", 1.0), g.attrs.get("beta", 1.0)
    dy, a, b = g.GO(0), g.I(0), g.I(1)
    dtype = g.type_of(dy).dtype if g.type_of(dy) else np.float32

    def product(i, inputs, attrs):
        """The Gemm giving input i's gradient; before opset 11, where Gemm requires C, with a
        zero C that beta 0 leaves out."""
        if not g.needs(i):
            return
        if g.opset < 11:
            inputs, attrs = inputs + [g.constant(np.zeros(1, dtype), "zero")], {**attrs, "beta": 0.0}
        g.node("Gemm", inputs, [g.GI(i)], attrs)
    # dA = alpha * dY op(B)^T, transposed back when A was transposed
    if ta:
        product(0, [b, dy], {"transA": tb, "transB": 1, "alpha": alpha})
    else:
        product(0, [dy, b], {"transB": 1 - tb, "alpha": alpha})
    # dB = alpha * op(A)^T dY, transposed back when B was transposed
    if tb:
        product(1, [dy, a], {"transA": 1, "transB": ta, "alpha": alpha})
    else:
        product(1, [a, dy], {"transA": 1 - ta, "alpha": alpha})
    if g.needs(2):
        grad = dy
        if beta != 1.0:
            grad = g.node("Mul", [dy, g.constant(np.array(beta, dtype=dtype), "beta")], [g.tmp("beta_dY")])
        reduce_to_input(g, grad, 2)


@gradient("MatMul", since=13, differentiable=(0, 1),
          emits=("Gemm", "MatMul", "Transpose", "Identity", "Shape", "SumToShape", "Reshape"))
def matmul_gradient(g):
    a_type, b_type = g.type_of(g.I(0)), g.type_of(g.I(1))
    ranks = (a_type.rank if a_type else None, b_type.rank if b_type else None)
    dy, a, b = g.GO(0), g.I(0), g.I(1)
    if ranks == (2, 2):
        g.node("Gemm", [dy, b], [g.GI(0)], {"transB": 1})
        g.node("Gemm", [a, dy], [g.GI(1)], {"transA": 1})
        return
    if None in ranks or min(ranks) < 2:
        raise GraphError(f"MatMul: its gradient needs operands of known rank >= 2, got ranks {ranks}")
    dims = _matrix_dims(g) if ranks[1] == 2 else None
    if dims is not None:
        _rows_times_matrix_gradient(g, *dims)
        return

    def swap_last(name, rank):
        perm = list(range(rank))
        perm[-2], perm[-1] = perm[-1], perm[-2]
        return g.node("Transpose", [name], [g.tmp("T")], {"perm": perm})
    if g.needs(0):
        reduce_to_input(g, g.node("MatMul", [dy, swap_last(b, ranks[1])], [g.tmp("dA")]), 0)
    if g.needs(1):
        reduce_to_input(g, g.node("MatMul", [swap_last(a, ranks[0]), dy], [g.tmp("dB")]), 1)


def _matrix_dims(g):
    """(K, N) of a MatMul of an N-D A by a 2-D B (K, N) as integers, each read from B or from
    A's or Y's last dim, whichever is known; None when one of them is not."""
    a_shape, b_shape = g.type_of(g.I(0)).shape, g.type_of(g.I(1)).shape
    y_type = g.type_of(g.forward.outputs[0])
    y_last = y_type.shape[-1] if y_type is not None and y_type.shape else None
    k = [d for d in (b_shape[0], a_shape[-1]) if isinstance(d, int)]
    n = [d for d in (b_shape[1], y_last) if isinstance(d, int)]
    return (k[0], n[0]) if k and n else None


def _shape_constant(g, name):
    """A Reshape target for forward value `name`'s shape: a constant, with -1 for its one
    symbolic dim if it has one (no Shape node to run), else its Shape read at run time."""
    shape = g.type_of(name).shape
    unknown = [i for i, d in enumerate(shape) if not isinstance(d, int)]
    if len(unknown) > 1:
        return g.shape_of(name)
    return g.constant(np.array([d if isinstance(d, int) else -1 for d in shape], np.int64), "shape")


def _rows_times_matrix_gradient(g, k, n):
    """The gradient of Y = A @ B for A (..., K) and a 2-D B (K, N): the product is one GEMM over
    A's rows, so is its gradient, on row views of A and dY (Reshape, no copy):
    dA = dY2 B^T reshaped to A, dB = A2^T dY2, as ONNX Runtime's builder does."""
    dy_rows = g.node("Reshape", [g.GO(0), g.constant(np.array([-1, n], np.int64), "rows_shape")], [g.tmp("dY_rows")])
    if g.needs(0):
        da_rows = g.node("Gemm", [dy_rows, g.I(1)], [g.tmp("dA_rows")], {"transB": 1})
        g.node("Reshape", [da_rows, _shape_constant(g, g.I(0))], [g.GI(0)])
    if g.needs(1):
        a_rows = g.node("Reshape", [g.I(0), g.constant(np.array([-1, k], np.int64), "rows_shape")], [g.tmp("A_rows")])
        g.node("Gemm", [a_rows, dy_rows], [g.GI(1)], {"transA": 1})
