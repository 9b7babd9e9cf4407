"""Linear and LinearGrad (minitrain's fused domain): a Linear layer over the last axis of an N-D
input, as PyTorch's exporter writes it (Transpose of the weight, MatMul, Add of the bias) and
fusion/linear.py fuses it before the gradient graph is built.

    Linear(X, W, B?) -> Y                 Y = X W^T + B over X's last axis: X (..., K), W (N, K)
                                          as a Linear layer stores it, B (N,); Y (..., N)
    LinearGrad(dY, X, W) -> dX?, dW?, dB? dX = dY W, dW = dY^T X over all of X's rows, dB = dY
                                          summed over its rows; only the outputs asked for

ONNX Runtime reaches the same products by MatMulAddFusion (a Gemm between Reshapes) and
MatMulTransposeFusion (FusedMatMul with transB); one node each way here, and the gradient one
node where the unfused graph takes a Transpose, three Reshapes, two Gemms and a SumToShape.
"""
from .gradients import gradient
from .schema import FUSED_DOMAIN, Input, schema
from .shape_utils import dims_differ


def check_linear(ctx, x, w, bias=None):
    """X of rank >= 2 whose last dim is W's second, W of rank 2, B (when given) of W's first dim;
    returns (X's shape, W's shape), each None when unknown."""
    ctx.require_rank(x, range(2, 9))
    ctx.require_rank(w, 2)
    x_shape, w_shape = ctx.shape(x), ctx.shape(w)
    names = [f.name for f in ctx.schema.inputs]
    if x_shape is not None and w_shape is not None and dims_differ(x_shape[-1], w_shape[1]):
        ctx.fail(f"input {names[x]!r} {tuple(x_shape)} has a last dim other than the second dim of "
                 f"input {names[w]!r} {tuple(w_shape)}")
    if bias is not None:
        ctx.require_rank(bias, 1)
        b_shape = ctx.shape(bias)
        if b_shape is not None and w_shape is not None and dims_differ(b_shape[0], w_shape[0]):
            ctx.fail(f"input {names[bias]!r} {tuple(b_shape)} is not of the first dim of input {names[w]!r} "
                     f"{tuple(w_shape)}")
    return x_shape, w_shape


def rows_output_shape(x_shape, w_shape):
    """Y's shape: X's leading dims, then W's first dim; None when either is unknown."""
    if x_shape is None or w_shape is None:
        return None
    return tuple(x_shape[:-1]) + (w_shape[0],)


@schema("Linear", domain=FUSED_DOMAIN, inputs=["X", "W", Input("B", optional=True)], outputs=["Y"])
def infer_linear(ctx):
    """Y (..., N) for X (..., K), W (N, K) and B (N,)."""
    x_shape, w_shape = check_linear(ctx, 0, 1, 2)
    return [ctx.out(rows_output_shape(x_shape, w_shape))]


@schema("LinearGrad", domain=FUSED_DOMAIN, inputs=["dY", "X", "W"], outputs=["dX", "dW", "dB"],
        optional_outputs=("dX", "dW", "dB"))
def infer_linear_grad(ctx):
    """dX like X, dW like W, dB (N,); dY has Linear's output shape."""
    x_shape, w_shape = check_linear(ctx, 1, 2)
    ctx.require_shape(0, rows_output_shape(x_shape, w_shape), "Linear's output for inputs 'X' and 'W'")
    return [ctx.out(x_shape), ctx.out(w_shape), ctx.out(None if w_shape is None else (w_shape[0],))]


@gradient("Linear", domain=FUSED_DOMAIN, since=1, differentiable=(0, 1, 2), emits=("LinearGrad",))
def linear_gradient(g):
    """One LinearGrad node naming the gradients that are needed (an empty name: not asked for)."""
    g.node("LinearGrad", [g.GO(0), g.I(0), g.I(1)], [g.GI(0), g.GI(1), g.GI(2)], domain=FUSED_DOMAIN)
