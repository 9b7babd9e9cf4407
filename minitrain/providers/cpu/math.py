"""CPU kernels of Gemm and MatMul: 2-D products on SciPy's BLAS (see blas.py), an N-D operand
times a matrix as one GEMM over its rows, other batched MatMuls through NumPy's matmul."""
import numpy as np

from ...ops.math import broadcasts_to
from ...registry import register_kernel
from .blas import gemm as blas_gemm


@register_kernel("Gemm", since=9)
def gemm(ctx):
    a, b, c = (ctx.inputs + [None])[:3]
    y = blas_gemm(a, b, ctx.attrs["transA"], ctx.attrs["transB"], ctx.attrs["alpha"])
    if c is not None and c.shape != y.shape and not broadcasts_to(c.shape, y.shape):
        ctx.fail(f"input 'C' {c.shape} must be unidirectionally broadcastable to Y {y.shape}")
    if c is not None and ctx.attrs["beta"] != 0.0:
        if ctx.attrs["beta"] == 1.0:
            y += c
        else:
            y += ctx.attrs["beta"] * c
    return {"Y": y}


@register_kernel("MatMul", since=13)
def matmul(ctx):
    a, b = ctx.inputs[0], ctx.inputs[1]
    if a.ndim == 2 and b.ndim == 2:
        return {"Y": blas_gemm(a, b)}
    if a.ndim > 2 and b.ndim == 2 and a.size and b.size:
        rows = np.ascontiguousarray(a).reshape(-1, a.shape[-1])
        return {"Y": blas_gemm(rows, np.ascontiguousarray(b)).reshape(a.shape[:-1] + b.shape[1:])}
    return {"Y": np.matmul(a, b)}
