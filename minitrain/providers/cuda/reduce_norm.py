"""CUDA kernels of ReduceSumSquare and ReduceL2 (cuda/reduce_norm.cu): axes from the attribute
(up to opset 13) or the input (18+, read from host memory as on the CPU).  A block per output
walks the reduced dims; nothing reduced (noop_with_empty_axes) is one element per output."""
from ...ops.reduce import reduced_axes, reduced_shape
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .layout import collapse, dense_strides, plan_args, plan_signature
from .shape import view

_SUM_SQUARE = Kernel("reduce_norm", "sum_square", "PPqq" + plan_signature(1) + plan_signature(1) + "i")


def _reduce(ctx, axes, noop_with_empty_axes, root):
    x = ctx.inputs[0]
    axes = reduced_axes(ctx.fail, x.ndim, axes, noop_with_empty_axes)
    summed = () if axes is None else axes
    y = ctx.provider.empty(reduced_shape(x.shape, summed, True), x.dtype)
    if y.size:
        strides = dense_strides(x.shape)
        kept = [d for d in range(x.ndim) if d not in summed]
        k_sizes, k_strides = collapse([x.shape[d] for d in kept], [strides[d] for d in kept])
        r_sizes, r_strides = collapse([x.shape[d] for d in summed], [strides[d] for d in summed])
        r = 1
        for d in summed:
            r *= x.shape[d]
        threads = min(256, max(32, 1 << max(r - 1, 0).bit_length()))
        _SUM_SQUARE.launch(ctx.provider, x.dtype, (min(y.size, ctx.provider.multiprocessors * 32), 1, 1),
                           (threads, 1, 1), x, y, y.size, r, *plan_args(k_sizes, k_strides),
                           *plan_args(r_sizes, r_strides), int(root))
    return {"reduced": view(ctx.provider, y, reduced_shape(x.shape, summed, ctx.attrs["keepdims"]))}


def _register(op_type, root):
    @register_kernel(op_type, since=1, end=17, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
    def attribute_axes(ctx):
        return _reduce(ctx, ctx.attrs["axes"], 0, root)

    @register_kernel(op_type, since=18, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1,))
    def input_axes(ctx):
        axes = ctx.inputs[1] if len(ctx.inputs) > 1 else None
        return _reduce(ctx, None if axes is None else [int(a) for a in axes.reshape(-1)],
                       ctx.attrs["noop_with_empty_axes"], root)


_register("ReduceSumSquare", False)
_register("ReduceL2", True)
