"""CPU kernels of Linear and LinearGrad (ops/linear.py): GEMMs over the rows of X and dY (row
views, no copy), the scale and bias applied to the product as it is written (blas.gemm), and
the gradients of W, B and S from dY^T X and dY's row sums, (N, K) and (N,) arrays."""
import numpy as np

from ...ops.schema import FUSED_DOMAIN
from ...registry import register_kernel
from .blas import gemm
from .elementwise import sum_to_shape


def _rows(x):
    """x (..., K) as a C-contiguous (rows, K) matrix."""
    return np.ascontiguousarray(x).reshape(-1, x.shape[-1])


def _optional(inputs, count):
    """`inputs` padded with None to `count` entries (absent optional inputs)."""
    return list(inputs) + [None] * (count - len(inputs))


@register_kernel("Linear", domain=FUSED_DOMAIN)
def linear(ctx):
    x, w, bias, scale = _optional(ctx.inputs, 4)
    rows = _rows(x)
    if scale is not None and bias is not None:
        bias = bias * scale             # (X W^T + B) S = X W^T S + B S
    y = gemm(rows, np.ascontiguousarray(w), trans_b=True, bias=bias, scale=scale)
    return {"Y": y.reshape(x.shape[:-1] + (w.shape[0],))}


@register_kernel("LinearGrad", domain=FUSED_DOMAIN)
def linear_grad(ctx):
    dy, x, w, bias, scale = _optional(ctx.inputs, 5)
    dy_rows, w = _rows(dy), np.ascontiguousarray(w)
    products = gemm(dy_rows, _rows(x), trans_a=True) if ctx.wants("dW") or ctx.wants("dS") else None
    sums = sum_to_shape(dy_rows, (w.shape[0],)) if ctx.wants("dB") or (ctx.wants("dS") and bias is not None) \
        else None
    column = None if scale is None else scale.reshape(-1, 1)
    out = {}
    if ctx.wants("dX"):
        out["dX"] = gemm(dy_rows, w if scale is None else w * column).reshape(x.shape)
    if ctx.wants("dW"):
        out["dW"] = products if scale is None else products * column
    if ctx.wants("dB"):
        out["dB"] = sums if scale is None else sums * scale
    if ctx.wants("dS"):        # the sum over the rows of dY (X W^T + B), whatever S is
        ds = (w * products).sum(axis=1)
        out["dS"] = ds if bias is None else ds + bias * sums
    return out
