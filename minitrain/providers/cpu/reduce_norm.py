"""CPU kernels of ReduceSumSquare and ReduceL2 (NumPy): axes from the attribute (up to opset 13)
or the input (18+).  Absent axes with noop_with_empty_axes=1 reduce nothing; the elementwise
part (X * X, |X|) still applies."""
import numpy as np

from ...ops.reduce import reduced_axes, reduced_shape
from ...registry import register_kernel


def _sum_square(x, axes):
    return np.sum(x * x, axis=axes, keepdims=True)


def _l2(x, axes):
    return np.sqrt(np.sum(x * x, axis=axes, keepdims=True))


def _reduce(ctx, reduction, axes, noop_with_empty_axes):
    x = ctx.inputs[0]
    axes = reduced_axes(ctx.fail, x.ndim, axes, noop_with_empty_axes)
    if axes is None:
        return {"reduced": np.asarray(reduction(x, ()), dtype=x.dtype)}
    result = np.asarray(reduction(x, axes), dtype=x.dtype)
    return {"reduced": result.reshape(reduced_shape(x.shape, axes, ctx.attrs["keepdims"]))}


def _register(op_type, reduction):
    @register_kernel(op_type, since=1, end=17)
    def attribute_axes(ctx):
        return _reduce(ctx, reduction, ctx.attrs["axes"], 0)

    @register_kernel(op_type, since=18, host_inputs=(1,))
    def input_axes(ctx):
        axes = ctx.inputs[1] if len(ctx.inputs) > 1 else None
        return _reduce(ctx, reduction, None if axes is None else [int(a) for a in axes.reshape(-1)],
                       ctx.attrs["noop_with_empty_axes"])


_register("ReduceSumSquare", _sum_square)
_register("ReduceL2", _l2)
