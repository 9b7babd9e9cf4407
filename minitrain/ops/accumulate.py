"""InPlaceAccumulator (com.microsoft, named after ONNX Runtime's): gradient accumulation over
micro-batches inside a compiled plan.

    InPlaceAccumulator(buffer, value, [scale]) -> accumulated

**This op writes its first input in place**, like the optimizer updates: buffer += scale *
value, and the output `accumulated` is the buffer itself (the same array, no copy), so a
session's accumulation buffers stay where they live.  `scale` is an optional scalar of the
element type (1 when absent), read from host memory.  The op has no gradient.
"""
from .schema import MS_DOMAIN, Input, schema
from .shape_utils import shapes_differ


@schema("InPlaceAccumulator", domain=MS_DOMAIN, inputs=["buffer", "value", Input("scale", optional=True)],
        outputs=["accumulated"])
def infer_accumulator(ctx):
    """accumulated: the buffer, of its shape; value must have the same shape."""
    buffer, value, scale = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    if shapes_differ(buffer, value):
        ctx.fail(f"input 'value' has shape {tuple(value)}; the buffer has shape {tuple(buffer)}")
    if scale is not None and (len(scale) > 1 or (len(scale) == 1 and scale[0] != 1)):
        ctx.fail(f"input 'scale' must be a scalar, got shape {tuple(scale)}")
    return [ctx.out(buffer)]
