"""CPU kernel of Clip: bounds from the attributes (opset 6) or the optional inputs (11+), applied
by minitrain._ext.pointwise_activation's clip loop."""
import numpy as np

from ..._ext import pointwise_activation as _pa
from ...registry import register_kernel
from ...threads import kernel_threads
from .specialized import specialized


def _clip(x, low, high):
    """min(max(x, low), high): with low > high every element becomes high, as ONNX says."""
    y = np.empty(x.shape, x.dtype)
    specialized(_pa.forward, x.dtype)("clip", np.ascontiguousarray(x).reshape(-1), y.reshape(-1), float(low),
                                      float(high), kernel_threads())
    return y


@register_kernel("Clip", since=6, end=10)
def clip_attributes(ctx):
    return {"output": _clip(ctx.inputs[0], ctx.attrs["min"], ctx.attrs["max"])}


@register_kernel("Clip", since=11, host_inputs=(1, 2))
def clip(ctx):
    x, low, high = (ctx.inputs + [None, None])[:3]
    low = -np.inf if low is None else low.reshape(())          # an absent bound clips nothing, infinities
    high = np.inf if high is None else high.reshape(())        # included (ONNX's reference, torch.clamp)
    return {"output": _clip(x, low, high)}
