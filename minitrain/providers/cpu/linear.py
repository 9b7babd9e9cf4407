"""CPU kernels of Linear and LinearGrad (ops/linear.py): GEMMs over the rows of X and dY
(row views, no copy), the bias written into Y before the GEMM adds the product to it."""
import numpy as np

from ...ops.schema import FUSED_DOMAIN
from ...registry import register_kernel
from .blas import gemm
from .elementwise import sum_to_shape
from .math import SMALL_OPERAND_RATIO


def _rows(x):
    """x (..., K) as a C-contiguous (rows, K) matrix."""
    return np.ascontiguousarray(x).reshape(-1, x.shape[-1])


@register_kernel("Linear", domain=FUSED_DOMAIN)
def linear(ctx):
    x, w, bias = (ctx.inputs + [None])[:3]
    rows = _rows(x)
    if w.size * SMALL_OPERAND_RATIO <= rows.size:
        # OpenBLAS multiplies rows by a transposed narrow matrix slowly: a transposed copy of
        # the small W costs less (as the Gemm kernel does)
        y = gemm(rows, np.ascontiguousarray(w.T), bias=bias)
    else:
        y = gemm(rows, np.ascontiguousarray(w), trans_b=True, bias=bias)
    return {"Y": y.reshape(x.shape[:-1] + (w.shape[0],))}


@register_kernel("LinearGrad", domain=FUSED_DOMAIN)
def linear_grad(ctx):
    dy, x, w = ctx.inputs
    dy_rows = _rows(dy)
    out = {}
    if ctx.wants("dX"):
        out["dX"] = gemm(dy_rows, np.ascontiguousarray(w)).reshape(x.shape)
    if ctx.wants("dW"):
        out["dW"] = gemm(dy_rows, _rows(x), trans_a=True)
    if ctx.wants("dB"):
        out["dB"] = sum_to_shape(dy_rows, (w.shape[0],))
    return out
