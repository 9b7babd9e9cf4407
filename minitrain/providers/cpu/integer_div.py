"""CPU kernel of Div on integers: the quotient truncated toward zero, as ONNX Runtime's (C++
integer division), not NumPy's floor division."""
import numpy as np

from ...ops.elementwise import INTEGER_DIV_TYPES
from ...registry import register_kernel


@register_kernel("Div", since=7, dtypes=INTEGER_DIV_TYPES)
def integer_div(ctx):
    a, b = ctx.inputs
    if not np.all(b):
        ctx.fail(f"input 'B' holds a zero divisor: {b.tolist() if b.size <= 8 else 'among its values'}")
    quotient = np.abs(a) // np.abs(b)
    return {"C": np.where((a < 0) != (b < 0), -quotient, quotient).astype(np.result_type(a, b))}
