"""CPU kernel of Where, keyed by the dtype of X and Y (the condition is bool): minitrain._ext.where
when the condition has the output's shape and X and Y have it too or hold one element (the
masks of Clip's and Where's gradients), NumPy otherwise."""
import numpy as np

from ..._ext import where as _where
from ...registry import register_kernel
from ...threads import kernel_threads


def _flat_operand(value, shape):
    """`value` as a flat contiguous buffer for the kernel: all of it when it has `shape`, its
    single element when it holds one; None when it needs NumPy's broadcasting."""
    if value.shape == shape or value.size == 1:
        return np.ascontiguousarray(value).reshape(-1)
    return None


@register_kernel("Where", since=9)
def where(ctx):
    condition, x, y = ctx.inputs
    shape = np.broadcast_shapes(condition.shape, x.shape, y.shape)
    operands = (_flat_operand(x, shape), _flat_operand(y, shape))
    if condition.shape != shape or x.dtype != y.dtype or any(o is None for o in operands):
        return {"Y": np.asarray(np.where(condition, x, y))}
    out = np.empty(shape, x.dtype)
    _where.where(np.ascontiguousarray(condition).reshape(-1).view(np.uint8), *operands, out.reshape(-1),
                 kernel_threads())
    return {"Y": out}
