"""CUDA kernels of broadcasting arithmetic (Add, Sub, Mul, Div), Neg, Sum and SumToShape
(cuda/elementwise.cu).  Broadcasting is planned here: the output's dims are collapsed with both
operands' strides (0 along a broadcast axis) into a StridedPlan that the kernel walks; operands
of the output's shape take the flat, vectorised kernel instead."""
import math

import numpy as np

from ...ops.elementwise import broadcast_axes
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .conv.bias import sum_slices
from .launch import BLOCK, SUM_COLS_SPLIT, grid_stride_blocks
from .layout import collapse, dense_strides, plan_args, plan_signature
from .shape import view

_FLAT = {op: Kernel("elementwise", op, "PPPq") for op in ("add", "sub", "mul", "div")}
_BCAST = {op: Kernel("elementwise", f"{op}_bcast", "PPPq" + plan_signature(2)) for op in _FLAT}
_NEG = Kernel("elementwise", "neg", "PPq")
_SUM_ROWS = Kernel("elementwise", "sum_rows", "PPqq" + plan_signature(1) + plan_signature(1))
_SUM_COLS = Kernel("elementwise", "sum_cols", "PPqq" + plan_signature(1) + plan_signature(1) + "q")
_SUM_NARROW_COLS = Kernel("elementwise", "sum_narrow_cols", "PPqqq")
SLICE_ROWS = 64         # reduced indices per block of sum_cols's first pass, when it takes two
NARROW_SUM_COLS = 64    # a dense (rows, m) sum with m at most this and many rows takes sum_narrow_cols
NARROW_MIN_ROWS = 4096
NARROW_ELEMENTS = 4096  # elements each block of sum_narrow_cols sums, at least


def packs(value):
    """Threads a flat elementwise kernel needs: one per 16-byte pack (elementwise_map.cuh)."""
    per_pack = 16 // value.dtype.itemsize
    return (value.size + per_pack - 1) // per_pack


def broadcast_strides(shape, rank):
    """Element strides of a contiguous array of `shape` broadcast to `rank` dims: 0 along the
    leading dims it lacks and along its size-1 dims."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step if d != 1 else 0)
        step *= d
    return [0] * (rank - len(shape)) + strides[::-1]


def binary(provider, op, a, b, out=None):
    """out = a <op> b with NumPy broadcasting; `out` (of the broadcast shape, possibly `a`
    itself) or a new array."""
    shape = np.broadcast_shapes(a.shape, b.shape)
    if out is None:
        out = provider.empty(shape, a.dtype)
    if out.size == 0:
        return out
    if a.size == b.size == out.size:        # same shape up to size-1 dims: same dense layout
        _FLAT[op].launch_elements(provider, out.dtype, packs(out), a, b, out, out.size)
    else:
        sizes, strides = collapse(shape, broadcast_strides(a.shape, len(shape)), broadcast_strides(b.shape, len(shape)))
        _BCAST[op].launch_elements(provider, out.dtype, out.size, a, b, out, out.size, *plan_args(sizes, strides))
    return out


def _binary_kernel(op):
    def kernel(ctx):
        return {"C": binary(ctx.provider, op, ctx.inputs[0], ctx.inputs[1])}
    return kernel


for _op in ("Add", "Sub", "Mul", "Div"):
    register_kernel(_op, since=7, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(_binary_kernel(_op.lower()))


@register_kernel("Neg", since=6, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def neg(ctx):
    x = ctx.inputs[0]
    y = ctx.provider.empty(x.shape, x.dtype)
    if y.size:
        _NEG.launch_elements(ctx.provider, x.dtype, packs(x), x, y, x.size)
    return {"Y": y}


@register_kernel("Sum", since=8, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def sum_(ctx):
    """Pairwise from the left, in place once the running sum has the output's shape."""
    arrays = [x for x in ctx.inputs if x is not None]
    if len(arrays) == 1:
        total = ctx.provider.empty(arrays[0].shape, arrays[0].dtype)
        ctx.provider.copy_into(total, arrays[0])
        return {"sum": total}
    total = binary(ctx.provider, "add", arrays[0], arrays[1])
    for a in arrays[2:]:
        grows = np.broadcast_shapes(total.shape, a.shape) != total.shape
        total = binary(ctx.provider, "add", total, a, out=None if grows else total)
    return {"sum": total}


@register_kernel("SumToShape", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
def sum_to_shape(ctx):
    x, shape = ctx.inputs[0], tuple(int(d) for d in ctx.inputs[1])
    axes = broadcast_axes(x.shape, shape)
    if not axes:
        return {"Y": view(ctx.provider, x, shape)}
    y = ctx.provider.empty(shape, x.dtype)
    if x.size == 0:                 # a sum over an empty axis is 0
        ctx.provider.fill_zero(y)
        return {"Y": y}
    strides = dense_strides(x.shape)
    kept = [d for d in range(x.ndim) if d not in axes]
    k_sizes, k_strides = collapse([x.shape[d] for d in kept], [strides[d] for d in kept])
    r_sizes, r_strides = collapse([x.shape[d] for d in axes], [strides[d] for d in axes])
    m, r = y.size, math.prod(r_sizes)
    args = (x, y, m, r, *plan_args(k_sizes, k_strides), *plan_args(r_sizes, r_strides))
    innermost = max((d for d in range(x.ndim) if x.shape[d] != 1), default=-1)
    limit = ctx.provider.multiprocessors * 32
    if innermost in axes:           # a block per output reads along x's rows
        threads = min(256, max(32, 1 << (r - 1).bit_length()))
        _SUM_ROWS.launch(ctx.provider, x.dtype, (min(m, limit), 1, 1), (threads, 1, 1), *args)
    elif k_sizes == [m] and k_strides == [[1]] and r_strides == [[m]] and m <= NARROW_SUM_COLS \
            and r >= NARROW_MIN_ROWS:
        sum_narrow_columns(ctx.provider, x, y, r, m)
    else:
        sum_columns(ctx.provider, x.dtype, args, m, r)
    return {"Y": y}


def sum_narrow_columns(provider, x, y, r, m):
    """y[c] = the sum of column c of a dense (r, m) x: blocks of rows into partials, then each
    column's partials in a fixed order (sum_slices)."""
    threads = BLOCK // m * m
    blocks = grid_stride_blocks(provider, r * m, NARROW_ELEMENTS)
    rows_per_block = -(-r // blocks)
    blocks = -(-r // rows_per_block)
    acc = np.float64 if x.dtype == np.float64 else np.float32
    part = provider.empty((blocks, m), acc)
    _SUM_NARROW_COLS.launch(provider, x.dtype, (blocks, 1, 1), (threads, 1, 1), x, part, r, m, rows_per_block,
                            shared=threads * np.dtype(acc).itemsize)
    sum_slices(provider, part, y, m, blocks)


def sum_columns(provider, dtype, args, m, r):
    """sum_cols: 32 adjacent outputs per block; when those blocks would not fill the device,
    the reduced range is cut into slices summed by more blocks into a scratch of partial sums,
    then the partial sums are added up by a second pass (the same order every run)."""
    x, y = args[:2]
    blocks = (m + 31) // 32
    slices = min(-(-r // SLICE_ROWS), max(1, 2 * provider.multiprocessors // blocks))
    limit = provider.multiprocessors * 32
    if slices == 1:
        _SUM_COLS.launch(provider, dtype, (min(blocks, limit), 1, 1), (32, SUM_COLS_SPLIT, 1), *args, r)
        return
    slice_rows = -(-r // slices)
    slices = -(-r // slice_rows)
    partial = provider.empty((slices, m), dtype)
    _SUM_COLS.launch(provider, dtype, (min(blocks, limit), slices, 1), (32, SUM_COLS_SPLIT, 1),
                     x, partial, *args[2:], slice_rows)
    second = (partial, y, m, slices, *plan_args([m], [[1]]), *plan_args([slices], [[m]]))
    _SUM_COLS.launch(provider, dtype, (min(blocks, limit), 1, 1), (32, SUM_COLS_SPLIT, 1), *second, slices)
