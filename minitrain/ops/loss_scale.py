"""Dynamic loss scaling for float16 training (com.microsoft), as ONNX Runtime's mixed-precision
training and PyTorch's GradScaler do it, on the device with no host round trip:

    MixedPrecisionScale(S, X) -> Y        Y = Cast<to>(X * S)   (ONNX Runtime's op, one tensor)

unscales a gradient of the scaled loss (S = 1 / loss scale) and casts it to `to` in the same
pass, so a float16 gradient reaches a float32 master weight unscaled with no separate Cast.

    LossScaleUpdate(grad_norm, scale, growth_tracker, skipped) -> found_inf

**writes its inputs scale, growth_tracker and skipped in place**, as PyTorch's
_amp_update_scale_ does (this op is minitrain's; ONNX Runtime keeps its scaler on the host):
when `grad_norm` (the global norm of the unscaled gradients, the optimizer update's output) is
inf or NaN, some gradient overflowed: the update was skipped (the optimizer's
skip_non_finite), scale *= backoff_factor, growth_tracker = 0 and skipped += 1; otherwise
growth_tracker += 1, and when it reaches growth_interval, scale *= growth_factor (kept only
where the product is finite) and growth_tracker = 0.  `found_inf` is a bool scalar.  Neither op
has a gradient.
"""
import numpy as np

from .compare import ONNX_DTYPES
from .schema import MS_DOMAIN, REQUIRED, Attr, Input, schema

SCALE_TYPES = (np.float32,)
COUNT_TYPES = (np.int64,)


@schema("MixedPrecisionScale", domain=MS_DOMAIN, inputs=[Input("S", types=SCALE_TYPES), "X"], outputs=["Y"],
        attrs={"to": Attr("int", REQUIRED)})
def infer_mixed_precision_scale(ctx):
    """Y: X's shape in the float type `to` names."""
    to = ctx.attrs["to"]
    if to not in ONNX_DTYPES or ONNX_DTYPES[to] not in ctx.schema.float_types:
        ctx.attr_fail("to", f"names no float type; expected one of "
                            f"{ {c: str(d) for c, d in ONNX_DTYPES.items() if d in ctx.schema.float_types} }")
    ctx.require_scalar(0, "one scale for the tensor")
    return [ctx.out(ctx.shape(1), ONNX_DTYPES[to])]


@schema("LossScaleUpdate", domain=MS_DOMAIN,
        inputs=["grad_norm", Input("scale", types=SCALE_TYPES), Input("growth_tracker", types=COUNT_TYPES),
                Input("skipped", types=COUNT_TYPES)],
        outputs=["found_inf"],
        attrs={"growth_factor": Attr("float", 2.0), "backoff_factor": Attr("float", 0.5),
               "growth_interval": Attr("int", 2000)})
def infer_loss_scale_update(ctx):
    """In place: scale, growth_tracker and skipped (see the module docstring); found_inf: bool ()."""
    if not ctx.attrs["growth_factor"] > 1:
        ctx.attr_fail("growth_factor", "must be > 1")
    if not 0 < ctx.attrs["backoff_factor"] < 1:
        ctx.attr_fail("backoff_factor", "must be in (0, 1)")
    if ctx.attrs["growth_interval"] < 1:
        ctx.attr_fail("growth_interval", "must be >= 1")
    for i, what in enumerate(("the global gradient norm", "the loss scale", "clean steps since the last change",
                              "the count of skipped updates")):
        ctx.require_scalar(i, what)
    return [ctx.out((), np.bool_)]
