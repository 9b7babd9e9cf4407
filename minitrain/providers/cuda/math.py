"""CUDA kernels of Gemm and MatMul: cuBLAS products (cublas.py) on the provider's stream, C's
broadcast by a kernel of cuda/math.cu; the same registrations as providers/cpu/math.py."""
import numpy as np

from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .layout import collapse

GEMM_BIAS = Kernel("math", "gemm_bias", "PPqqqqT")


def broadcast_bias(provider, c, y, scale):
    """y = scale * C broadcast to y's (m, n) (C of rank <= 2, unidirectionally broadcastable)."""
    m, n = y.shape
    cm, cn = (1,) * (2 - c.ndim) + tuple(c.shape)
    if (cm, cn) == (m, n) and scale == 1.0:
        provider.copy_into(y, c.reshape(m, n))
        return
    GEMM_BIAS.launch_elements(provider, y.dtype, m * n, c, y, m, n, 0 if cm == 1 else cn, 0 if cn == 1 else 1, scale)


@register_kernel("Gemm", since=9, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def gemm(ctx):
    a, b, c = (ctx.inputs + [None])[:3]
    ta, tb = bool(ctx.attrs["transA"]), bool(ctx.attrs["transB"])
    alpha, beta = ctx.attrs["alpha"], ctx.attrs["beta"]
    m, k = (a.shape[1], a.shape[0]) if ta else a.shape
    n = b.shape[0] if tb else b.shape[1]
    y = ctx.provider.empty((m, n), ctx.dtype)
    if y.size == 0:
        return {"Y": y}
    with_c = c is not None and beta != 0.0
    if k == 0:      # no product: Y is beta * C, or zeros
        if with_c:
            broadcast_bias(ctx.provider, c, y, beta)
        else:
            ctx.provider.fill_zero(y)
        return {"Y": y}
    if with_c:
        broadcast_bias(ctx.provider, c, y, 1.0)
    ctx.provider.blas.gemm(a, b, y, ta, tb, alpha, beta if with_c else 0.0)
    return {"Y": y}


def batch_strides(shape, batch, matrix):
    """Element strides of an operand's batch dims laid over the broadcast `batch` (0 where
    the operand is broadcast), for matrices of `matrix` elements stored densely."""
    shape = (1,) * (len(batch) - len(shape)) + tuple(shape)
    strides, step = [], matrix
    for d in reversed(shape):
        strides.append(0 if d == 1 else step)
        step *= d
    return strides[::-1]


def batched_matmul(blas, a, b, y, batch):
    """y[i] = a[i] @ b[i] over the broadcast batch dims: the innermost run of batch dims
    that every operand steps through evenly is one strided-batched call (stride 0 for a
    broadcast operand); the other dims (mixed broadcasting, rare) are looped here."""
    (m, k), n = a.shape[-2:], b.shape[-1]
    sizes, (sa, sb, sy) = collapse(batch, batch_strides(a.shape[:-2], batch, m * k),
                                   batch_strides(b.shape[:-2], batch, k * n), batch_strides(batch, batch, m * n))
    for index in np.ndindex(*sizes[:-1]):
        offsets = [sum(i * s for i, s in zip(index, st)) for st in (sa, sb, sy)]
        blas.gemm_strided_batched(a, b, y, sizes[-1], (sa[-1], sb[-1], sy[-1]), offsets=offsets)


@register_kernel("MatMul", since=13, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def matmul(ctx):
    a, b = ctx.inputs[0], ctx.inputs[1]
    a2 = a.reshape((1,) + a.shape) if a.ndim == 1 else a
    b2 = b.reshape(b.shape + (1,)) if b.ndim == 1 else b
    (m, k), n = a2.shape[-2:], b2.shape[-1]
    batch = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    y = ctx.provider.empty(batch + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ()), ctx.dtype)
    if y.size == 0:
        return {"Y": y}
    if k == 0:
        ctx.provider.fill_zero(y)
        return {"Y": y}
    blas = ctx.provider.blas
    if all(d == 1 for d in b2.shape[:-2]):
        # B is one matrix: A's batch folds into its rows, one GEMM
        blas.gemm(a2.reshape(-1, k), b2.reshape(k, n), y.reshape(-1, n))
    else:
        batched_matmul(blas, a2, b2, y.reshape(batch + (m, n)), batch)
    return {"Y": y}
