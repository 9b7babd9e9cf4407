"""Linear and LinearGrad (minitrain's fused domain): a Linear layer over the last axis of an N-D
input, as PyTorch's exporter writes it (Transpose of the weight, MatMul, Add of the bias, and a
Mul by a per-channel scale where one follows, as ConvNeXt's layer scale), which
fusion/linear.py fuses before the gradient graph is built.

    Linear(X, W, B?, S?) -> Y            Y = (X W^T + B) S over X's last axis: X (..., K), W (N, K)
                                         as a Linear layer stores it, B and S (N,); Y (..., N)
    LinearGrad(dY, X, W, B?, S?)         with G = dY^T X over all rows (N, K) and s = the sum of
        -> dX?, dW?, dB?, dS?            dY's rows (N,):  dX = dY (S W),  dW = S G,  dB = S s,
                                         dS = the sum over k of W G, plus B s; only the
                                         outputs asked for

dS needs no pass over the rows of its own: the sum over the rows of dY (X W^T + B) is W G + B s
(the gradient of an absent S, 1, alike).  ONNX
Runtime reaches the same products by MatMulAddFusion (a Gemm between Reshapes) and
MatMulTransposeFusion (FusedMatMul with transB); one node each way here, and the gradient one
node where the unfused graph takes a Transpose, three Reshapes, two Gemms, a SumToShape and the
scale's MulGrad.
"""
from .gradients import gradient
from .schema import FUSED_DOMAIN, Input, schema
from .shape_utils import dims_differ


def check_linear(ctx, x, w, vectors):
    """X of rank >= 2 whose last dim is W's second, W of rank 2, and each input in `vectors`
    (bias, scale), when given, one-dimensional of W's first dim; returns (X's shape, W's shape),
    each None when unknown."""
    ctx.require_rank(x, range(2, 9))
    ctx.require_rank(w, 2)
    x_shape, w_shape = ctx.shape(x), ctx.shape(w)
    names = [f.name for f in ctx.schema.inputs]
    if x_shape is not None and w_shape is not None and dims_differ(x_shape[-1], w_shape[1]):
        ctx.fail(f"input {names[x]!r} {tuple(x_shape)} has a last dim other than the second dim of "
                 f"input {names[w]!r} {tuple(w_shape)}")
    for i in vectors:
        ctx.require_rank(i, 1)
        shape = ctx.shape(i)
        if shape is not None and w_shape is not None and dims_differ(shape[0], w_shape[0]):
            ctx.fail(f"input {names[i]!r} {tuple(shape)} is not of the first dim of input {names[w]!r} "
                     f"{tuple(w_shape)}")
    return x_shape, w_shape


def rows_output_shape(x_shape, w_shape):
    """Y's shape: X's leading dims, then W's first dim; None when either is unknown."""
    if x_shape is None or w_shape is None:
        return None
    return tuple(x_shape[:-1]) + (w_shape[0],)


@schema("Linear", domain=FUSED_DOMAIN, inputs=["X", "W", Input("B", optional=True), Input("S", optional=True)],
        outputs=["Y"])
def infer_linear(ctx):
    """Y (..., N) for X (..., K), W (N, K), B and S (N,)."""
    x_shape, w_shape = check_linear(ctx, 0, 1, (2, 3))
    return [ctx.out(rows_output_shape(x_shape, w_shape))]


@schema("LinearGrad", domain=FUSED_DOMAIN,
        inputs=["dY", "X", "W", Input("B", optional=True), Input("S", optional=True)],
        outputs=["dX", "dW", "dB", "dS"], optional_outputs=("dX", "dW", "dB", "dS"))
def infer_linear_grad(ctx):
    """dX like X, dW like W, dB and dS (N,); dY has Linear's output shape."""
    x_shape, w_shape = check_linear(ctx, 1, 2, (3, 4))
    ctx.require_shape(0, rows_output_shape(x_shape, w_shape), "Linear's output for inputs 'X' and 'W'")
    vector = None if w_shape is None else (w_shape[0],)
    return [ctx.out(x_shape), ctx.out(w_shape), ctx.out(vector), ctx.out(vector)]


@gradient("Linear", domain=FUSED_DOMAIN, since=1, differentiable=(0, 1, 2, 3), emits=("LinearGrad",))
def linear_gradient(g):
    """One LinearGrad node naming the gradients that are needed (an empty name: not asked for);
    its inputs are the forward ones that it has, B and S only where the forward node had them."""
    inputs = [g.GO(0), g.I(0), g.I(1), g.I(2), g.I(3)]
    while not inputs[-1]:
        inputs.pop()
    g.node("LinearGrad", inputs, [g.GI(0), g.GI(1), g.GI(2), g.GI(3)], domain=FUSED_DOMAIN)
