"""An activation gradient (ReluGrad, SigmoidGrad, TanhGrad, LeakyReluGrad, HardSwishGrad)
whose dX feeds a bias gradient -> ActivationGradBias (dX and dB in one pass).

The bias gradient is either a SumToShape of dX (N, C) to the constant shape (C,) (Gemm's bias)
or the dB output of a ConvGrad reading dX as its dY (the ConvGrad then computes dX and dW
only).  dX stays available to its other readers."""
import numpy as np

from ..ops.fused import ACTIVATIONS, GRADIENT_ACTIVATIONS, LEAKY_DEFAULT
from ..ops.schema import FUSED_DOMAIN, MS_DOMAIN
from .rewrite import fused_node

FUSED = "ActivationGradBias"
GRADIENTS = {ACTIVATIONS[act]: act for act in GRADIENT_ACTIVATIONS}


def gradient_attrs(grad):
    """The fused op's activation attributes for the activation gradient node `grad`."""
    attrs = {"activation": GRADIENTS[grad.op_type]}
    if grad.op_type == "LeakyReluGrad":
        attrs["activation_alpha"] = float(grad.attrs.get("alpha", LEAKY_DEFAULT))
    return attrs


def bias_reader(rewrite, dx):
    """The (node, dB name) reducing dx to a bias gradient, or None."""
    shape = rewrite.types[dx].shape
    for reader in rewrite.readers_of(dx):
        kind = (reader.op_type, reader.domain)
        if kind == ("SumToShape", MS_DOMAIN) and reader.inputs[0] == dx and shape is not None and len(shape) == 2:
            target = rewrite.constant(reader.inputs[1])
            if target is not None and isinstance(shape[1], int) and np.array_equal(target, [shape[1]]):
                return reader, reader.outputs[0]
        if kind == ("ConvGrad", MS_DOMAIN) and reader.inputs[0] == dx and len(reader.outputs) > 2 and reader.outputs[2]:
            return reader, reader.outputs[2]
    return None


def take_over_bias(rewrite, fused, reader):
    """Let `fused` give the bias gradient in place of `reader` (found by bias_reader): a
    SumToShape goes, a ConvGrad stays without its dB."""
    if reader.op_type == "SumToShape":
        rewrite.replace(reader, None)
    else:
        fused.name += ".dB"
        reader.outputs[2] = ""


def apply(rewrite):
    for grad in [n for n in rewrite.graph.nodes if n.op_type in GRADIENTS and n.domain == MS_DOMAIN]:
        found = bias_reader(rewrite, grad.outputs[0])
        if found is None:
            continue
        reader, db = found
        if not rewrite.can_fuse([grad, reader], FUSED, FUSED_DOMAIN):
            continue
        fused = fused_node(FUSED, FUSED_DOMAIN, grad.inputs, [grad.outputs[0], db], gradient_attrs(grad),
                           [grad, reader])
        rewrite.replace(grad, fused)
        take_over_bias(rewrite, fused, reader)
        rewrite.refresh()
