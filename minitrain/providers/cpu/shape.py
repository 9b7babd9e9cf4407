"""CPU kernels of the re-layout ops; they return views where NumPy can (no copy)."""
import functools
import math

import numpy as np

from ..._ext import transpose as _transpose
from ...ops.schema import DATA_TYPES
from ...ops.shape import reshape_target, shape_slice
from ...registry import register_kernel
from ...threads import kernel_threads

# Element size -> the word type that ext/transpose.pyx moves elements of that size as.
TRANSPOSE_WORDS = {4: np.uint32, 8: np.uint64}
# Smaller arrays go through NumPy, whose copy costs less than the kernel call.
MIN_KERNEL_TRANSPOSE = 4096


@register_kernel("Identity", since=1, dtypes=DATA_TYPES)
def identity(ctx):
    return {"output": ctx.inputs[0]}


@register_kernel("Flatten", since=1, dtypes=DATA_TYPES)
def flatten(ctx):
    x = ctx.inputs[0]
    axis = ctx.attrs["axis"] + x.ndim if ctx.attrs["axis"] < 0 else ctx.attrs["axis"]
    return {"output": x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))}


class _ReshapeContext:
    """Adapts a KernelContext to the error helpers reshape_target expects."""

    def __init__(self, ctx):
        self.fail = ctx.fail


@register_kernel("Reshape", since=5, dtypes=DATA_TYPES)
def reshape(ctx):
    x, target = ctx.inputs[0], ctx.inputs[1].tolist()
    allowzero = ctx.attrs.get("allowzero", 0)
    if (allowzero or 0 not in target) and min(target, default=0) >= -1:
        try:        # no dim copied: NumPy's rules are ONNX's; what NumPy refuses, reshape_target names
            return {"reshaped": x.reshape(target)}
        except ValueError:
            pass
    return {"reshaped": x.reshape(reshape_target(_ReshapeContext(ctx), x.shape, target, allowzero))}


@register_kernel("Shape", since=1, dtypes=DATA_TYPES)
def shape(ctx):
    dims = ctx.inputs[0].shape
    start, end = ctx.attrs.get("start", 0), ctx.attrs.get("end")
    if start or end is not None:
        begin, stop = shape_slice(len(dims), start, end)
        dims = dims[begin:stop]
    return {"shape": np.array(dims, dtype=np.int64)}


@functools.lru_cache(maxsize=256)
def transpose_planes(shape, perm):
    """(batches, rows, cols) when permuting `shape` by `perm` is a batched 2-D transpose, the
    axes of size 1 dropped and neighbouring axes that stay neighbours merged: (rows, cols) ->
    (cols, rows) or (batches, rows, cols) -> (batches, cols, rows); else None."""
    axes = [a for a in range(len(shape)) if shape[a] != 1]
    kept = [axes.index(p) for p in perm if shape[p] != 1]       # renumbered without the 1s
    groups = []         # runs of input axes that stay together, in output order
    for p in kept:
        if groups and groups[-1][-1] + 1 == p:
            groups[-1].append(p)
        else:
            groups.append([p])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])
    sizes = [math.prod(shape[axes[p]] for p in groups[g]) for g in order]
    if order == [1, 0]:
        return (1, sizes[0], sizes[1])
    if order == [0, 2, 1]:
        return tuple(sizes)
    return None


@register_kernel("Transpose", since=1, dtypes=DATA_TYPES)
def transpose(ctx):
    x, perm = ctx.inputs[0], ctx.attrs["perm"]
    perm = tuple(reversed(range(x.ndim))) if perm is None else tuple(perm)
    word = TRANSPOSE_WORDS.get(x.dtype.itemsize)
    planes = None
    if word is not None and x.size >= MIN_KERNEL_TRANSPOSE and x.flags.c_contiguous:
        planes = transpose_planes(x.shape, perm)
    if planes is None:
        return {"transposed": np.ascontiguousarray(np.transpose(x, perm))}
    y = np.empty(tuple(x.shape[p] for p in perm), dtype=x.dtype)
    _transpose.transpose_planes(x.reshape(-1).view(word), y.reshape(-1).view(word), *planes, kernel_threads())
    return {"transposed": y}
