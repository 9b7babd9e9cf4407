"""CPU kernels of Constant and ConstantOfShape (NumPy).  A node without float inputs is looked up
by float32 (inference.check_node), whatever the dtype of the tensor it makes."""
import numpy as np

from ...ops.constant import constant_array, fill_value
from ...registry import register_kernel


@register_kernel("Constant", since=1, dtypes=(np.float32,))
def constant(ctx):
    return {"output": constant_array(ctx.fail, ctx.attrs).copy()}


@register_kernel("ConstantOfShape", since=9, dtypes=(np.int64,), host_inputs=(0,))
def constant_of_shape(ctx):
    dims = tuple(int(d) for d in ctx.inputs[0].reshape(-1))
    if any(d < 0 for d in dims):
        ctx.fail(f"input 'input' {dims} holds a negative dim")
    element = fill_value(ctx.fail, ctx.attrs["value"])
    return {"output": np.full(dims, element, dtype=element.dtype)}
