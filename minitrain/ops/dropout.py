"""Dropout (ONNX 12/13) and its gradient, DropoutGrad (com.microsoft), as ONNX Runtime has them.

In training mode (the optional bool input training_mode is true) each element is kept with
probability 1 - ratio and scaled by 1 / (1 - ratio); the bool output `mask` records which
elements were kept, and DropoutGrad multiplies dY by that same mask and scale.  Otherwise (the
default) Dropout is the identity and the mask is all true.  Masks come from minitrain's global
generator (minitrain.random.seed); with the `seed` attribute every run draws the same mask.
The CUDA kernel draws its mask with Philox4x32-10 keyed by a seed per call (the attribute, or
a number drawn from the global generator): reproducible on the GPU, but not the CPU's mask.
"""
import numpy as np

from .gradients import gradient
from .schema import GRAPH_FLOAT_TYPES, MS_DOMAIN, Attr, Input, schema

RATIO_TYPES = GRAPH_FLOAT_TYPES
MODE_TYPES = (np.bool_,)


def dropout_settings(ctx, ratio, training_mode):
    """(ratio, training) from the optional inputs, checking that 0 <= ratio < 1 (ONNX's range,
    in training mode or not, as ONNX Runtime checks it)."""
    r = 0.5 if ratio is None else float(ratio.reshape(-1)[0])
    training = False if training_mode is None else bool(training_mode.reshape(-1)[0])
    if not 0 <= r < 1:
        ctx.fail(f"input 'ratio' is {r}; it must be in [0, 1)")
    return r, training


def _check_scalar(ctx, i):
    shape = ctx.shape(i)
    if shape is not None and (len(shape) > 1 or (len(shape) == 1 and shape[0] != 1)):
        ctx.fail(f"input {ctx.schema.inputs[i].name!r} must be a scalar, got shape {tuple(shape)}")


def infer_dropout(ctx):
    """output like data; mask: bool, like data."""
    if ctx.attrs["seed"] is not None and ctx.attrs["seed"] < 0:
        ctx.attr_fail("seed", "must be >= 0")
    _check_scalar(ctx, 1)
    _check_scalar(ctx, 2)
    return [ctx.out(ctx.shape(0)), ctx.out(ctx.shape(0), dtype=np.bool_)]


for _v in (12, 13):
    schema("Dropout", since=_v,
           inputs=["data", Input("ratio", types=RATIO_TYPES, optional=True),
                   Input("training_mode", types=MODE_TYPES, optional=True)],
           outputs=["output", "mask"], attrs={"seed": Attr("int")}, optional_outputs=("mask",))(infer_dropout)


@schema("DropoutGrad", domain=MS_DOMAIN,
        inputs=["dY", Input("mask", types=MODE_TYPES), Input("ratio", types=RATIO_TYPES, optional=True),
                Input("training_mode", types=MODE_TYPES, optional=True)], outputs=["dX"])
def infer_dropout_grad(ctx):
    """dX = dY * mask / (1 - ratio) in training mode, dY otherwise."""
    dy, mask = ctx.shape(0), ctx.shape(1)
    if dy is not None and mask is not None and tuple(dy) != tuple(mask):
        ctx.fail(f"inputs 'dY' {tuple(dy)} and 'mask' {tuple(mask)} must have the same shape")
    _check_scalar(ctx, 2)
    _check_scalar(ctx, 3)
    return [ctx.out(dy)]


@gradient("Dropout", since=12, emits=("DropoutGrad",))
def dropout_gradient(g):
    g.node("DropoutGrad", [g.GO(0), g.O(1), g.I(1), g.I(2)], [g.GI(0)], domain=MS_DOMAIN)
