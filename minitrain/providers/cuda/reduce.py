"""CUDA kernels of ReduceSum, ReduceMean and ReduceMax (cuda/reduce.cu), registered as the CPU's
are: axes from the attribute up to opset 12 (ReduceSum) or 17, from the int64 input (read from
host memory) after.  ReduceSum and ReduceMean share the scaled-sum kernels.

The kept and the reduced dims are collapsed into two strided plans over x; a block per output
reduces along x's rows when the innermost axis is reduced, a thread per output otherwise."""
import math

from ...ops.reduce import reduced_axes, reduced_shape
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .layout import collapse, dense_strides, plan_args, plan_signature

PLANS = "T" + plan_signature(1) + plan_signature(1)
_ROWS = {op: Kernel("reduce", f"reduce_rows_{op}", "PPqq" + PLANS) for op in ("sum", "max")}
_COLS = {op: Kernel("reduce", f"reduce_cols_{op}", "PPqq" + PLANS) for op in ("sum", "max")}


def reduce_device(provider, op, x, axes, keepdims):
    """x reduced over `axes` (sorted, non-negative) by "sum", "mean" or "max"."""
    shape = reduced_shape(x.shape, axes, keepdims)
    y = provider.empty(shape, x.dtype)
    if y.size == 0:
        return y
    strides = dense_strides(x.shape)
    kept = [d for d in range(x.ndim) if d not in axes]
    k_sizes, k_strides = collapse([x.shape[d] for d in kept], [strides[d] for d in kept])
    r_sizes, r_strides = collapse([x.shape[d] for d in axes], [strides[d] for d in axes])
    m, r = y.size, math.prod(r_sizes)
    count = math.prod(x.shape[a] for a in axes)
    scale = (1.0 / count if count else float("inf")) if op == "mean" else 1.0
    args = (x, y, m, r, scale, *plan_args(k_sizes, k_strides), *plan_args(r_sizes, r_strides))
    kernel = "max" if op == "max" else "sum"
    innermost = max((d for d in range(x.ndim) if x.shape[d] != 1), default=-1)
    if innermost in axes:
        threads = min(256, max(32, 1 << max(r - 1, 0).bit_length()))
        _ROWS[kernel].launch(provider, x.dtype, (min(m, provider.multiprocessors * 32), 1, 1), (threads, 1, 1),
                             *args)
    else:
        _COLS[kernel].launch_elements(provider, x.dtype, m, *args)
    return y


def _reduce(ctx, op, axes, noop_with_empty_axes):
    x = ctx.inputs[0]
    axes = reduced_axes(ctx.fail, x.ndim, axes, noop_with_empty_axes)
    if axes is None:
        return {"reduced": x}
    return {"reduced": reduce_device(ctx.provider, op, x, axes, ctx.attrs["keepdims"])}


def _register(op_type, op, attribute_end, input_since):
    @register_kernel(op_type, since=1, end=attribute_end, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
    def attribute_axes(ctx):
        return _reduce(ctx, op, ctx.attrs["axes"], 0)

    @register_kernel(op_type, since=input_since, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
    def input_axes(ctx):
        axes = ctx.inputs[1] if len(ctx.inputs) > 1 else None
        return _reduce(ctx, op, None if axes is None else [int(a) for a in axes.reshape(-1)],
                       ctx.attrs["noop_with_empty_axes"])


_register("ReduceSum", "sum", 12, 13)
_register("ReduceMean", "mean", 17, 18)
_register("ReduceMax", "max", 17, 18)
