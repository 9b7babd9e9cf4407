"""An activation's gradient feeding a BatchNormalizationGrad -> BatchNormActivationGrad.

    dY = ReluGrad(dZ, A)  (or HardSwishGrad)                 ->  dX, dscale, dbias =
    dX, dscale, dbias = BatchNormalizationGrad(dY, X, ...)         BatchNormActivationGrad(dZ, A, X, ...)

A BatchNormalization followed by its activation (ResNet's ReLU, MobileNetV3's HardSwish)
differentiates into these two nodes; fused, the activation's gradient is made a block of channels
at a time where both of BatchNormalizationGrad's passes read it (ext/batchnorm.h), never written
out as a tensor of X's shape.  The rule fires where dY has no reader but the
BatchNormalizationGrad, is not kept, and A has X's element type.  Only the CPU has a kernel of the
fused op, so the rule leaves graphs on CUDA as they are."""
from ..ops.fused import BATCH_NORM_ACTIVATIONS
from ..ops.schema import FUSED_DOMAIN, MS_DOMAIN
from .activation_grad_bias import GRADIENTS
from .rewrite import fused_node

FUSED = "BatchNormActivationGrad"


def _activation_gradient(rewrite, bn_grad):
    """The activation gradient node whose dX only `bn_grad` reads, as its dY, or None."""
    dy = bn_grad.inputs[0]
    grad = rewrite.producers.get(dy)
    if grad is None or grad.domain != MS_DOMAIN or GRADIENTS.get(grad.op_type) not in BATCH_NORM_ACTIVATIONS:
        return None
    if dy in rewrite.kept or rewrite.readers_of(dy) != [bn_grad] or bn_grad.inputs[1:].count(dy):
        return None
    if rewrite.types[grad.inputs[1]].dtype != rewrite.types[bn_grad.inputs[1]].dtype:
        return None
    return grad


def apply(rewrite):
    for bn_grad in [n for n in rewrite.graph.nodes if (n.op_type, n.domain) == ("BatchNormalizationGrad", MS_DOMAIN)]:
        grad = _activation_gradient(rewrite, bn_grad)
        if grad is None or not rewrite.can_fuse([grad, bn_grad], FUSED, FUSED_DOMAIN):
            continue
        attrs = {**bn_grad.attrs, "activation": GRADIENTS[grad.op_type]}
        fused = fused_node(FUSED, FUSED_DOMAIN, [grad.inputs[0], grad.inputs[1], *bn_grad.inputs[1:]],
                           list(bn_grad.outputs), attrs, [grad, bn_grad])
        rewrite.replace(bn_grad, fused)
        rewrite.replace(grad, None)
        rewrite.refresh()
