"""CPU kernels of Gemm and MatMul: BLAS through NumPy's matmul (transposes are free views)."""
import numpy as np

from ...registry import register_kernel


@register_kernel("Gemm", since=9)
def gemm(ctx):
    a, b, c = (ctx.inputs + [None])[:3]
    a = a.T if ctx.attrs["transA"] else a
    b = b.T if ctx.attrs["transB"] else b
    y = np.matmul(a, b)
    if ctx.attrs["alpha"] != 1.0:
        y *= ctx.attrs["alpha"]
    if c is not None and ctx.attrs["beta"] != 0.0:
        if ctx.attrs["beta"] == 1.0:
            y += c
        else:
            y += ctx.attrs["beta"] * c
    return {"Y": y}


@register_kernel("MatMul", since=13)
def matmul(ctx):
    return {"Y": np.matmul(ctx.inputs[0], ctx.inputs[1])}
