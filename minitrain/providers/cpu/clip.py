"""CPU kernel of Clip: bounds from the attributes (opset 6) or the optional inputs (11+)."""
import numpy as np

from ...registry import register_kernel


def _clip(x, low, high):
    """min(max(x, low), high): with low > high every element becomes high, as ONNX says."""
    return np.asarray(np.minimum(np.maximum(x, low), high)).astype(x.dtype, copy=False)


@register_kernel("Clip", since=6, end=10)
def clip_attributes(ctx):
    return {"output": _clip(ctx.inputs[0], ctx.attrs["min"], ctx.attrs["max"])}


@register_kernel("Clip", since=11, host_inputs=(1, 2))
def clip(ctx):
    x, low, high = (ctx.inputs + [None, None])[:3]
    info = np.finfo(x.dtype)
    low = info.min if low is None else low.reshape(())
    high = info.max if high is None else high.reshape(())
    return {"output": _clip(x, low, high)}
