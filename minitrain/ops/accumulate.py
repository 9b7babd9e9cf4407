"""InPlaceAccumulator (com.microsoft, named after ONNX Runtime's): gradient accumulation over
micro-batches inside a compiled plan.

    InPlaceAccumulator(buffer, value, [scale]) -> accumulated

**This op writes its first input in place**, like the optimizer updates: buffer += scale *
value, and the output `accumulated` is the buffer itself (the same array, no copy), so a
session's accumulation buffers stay where they live.  `scale` is an optional scalar of the
element type (1 when absent).  A float32 buffer also accumulates a float16 or bfloat16 value,
widened exactly as it is read (a mixed-precision gradient, as the optimizer updates read them:
ops/optimizer.py).  The op has no gradient.

    InPlaceAccumulatorV2(buffer, value, [overwrite_flag]) -> updated_flag, [accumulated]

is the form ONNX Runtime's training artifacts (onnxruntime.training.artifacts) put after each
gradient: buffer = value when the bool `overwrite_flag` is true (the first micro-batch after
a gradient reset, ORT's `lazy_reset_grad`), buffer += value otherwise; it too **writes its
first input in place**.  `updated_flag` is a bool (1,) tensor, true once the buffer is written;
the optional `accumulated` is the buffer itself.
"""
import numpy as np

from ..errors import DTypeError
from .optimizer import LOW_GRADIENT_TYPES
from .schema import GRAPH_FLOAT_TYPES, MS_DOMAIN, Input, schema
from .shape_utils import shapes_differ


@schema("InPlaceAccumulator", domain=MS_DOMAIN,
        inputs=["buffer", Input("value", types=GRAPH_FLOAT_TYPES), Input("scale", optional=True)],
        outputs=["accumulated"])
def infer_accumulator(ctx):
    """accumulated: the buffer, of its shape; value must have the same shape, and the buffer's
    type or, for a float32 buffer, float16 or bfloat16."""
    value_type = ctx.input_types[1].dtype
    low = LOW_GRADIENT_TYPES if ctx.dtype == np.float32 else ()
    if value_type != ctx.dtype and value_type not in low:
        also = f" or {' / '.join(str(d) for d in low)}" if low else ""
        ctx.fail(f"input 'value' has dtype {value_type}; expected the buffer's {ctx.dtype}{also}", DTypeError)
    buffer, value, scale = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    check_same_shape(ctx, "value", buffer, value)
    if scale is not None and (len(scale) > 1 or (len(scale) == 1 and scale[0] != 1)):
        ctx.fail(f"input 'scale' must be a scalar, got shape {tuple(scale)}")
    return [ctx.out(buffer)]


def check_same_shape(ctx, what, buffer, value):
    """Fail unless `value` has the buffer's shape (dims compared where both are ints)."""
    if shapes_differ(buffer, value):
        ctx.fail(f"input {what!r} has shape {tuple(value)}; the buffer has shape {tuple(buffer)}")


@schema("InPlaceAccumulatorV2", domain=MS_DOMAIN,
        inputs=["buffer", "value", Input("overwrite_flag", types=(np.bool_,), optional=True)],
        outputs=["updated_flag", "accumulated"], optional_outputs=("accumulated",))
def infer_accumulator_v2(ctx):
    """updated_flag: bool (1,); accumulated: the buffer, of its shape."""
    check_same_shape(ctx, "value", ctx.shape(0), ctx.shape(1))
    ctx.require_scalar(2, "one flag for the whole buffer")
    return [ctx.out((1,), np.bool_), ctx.out(ctx.shape(0))]
