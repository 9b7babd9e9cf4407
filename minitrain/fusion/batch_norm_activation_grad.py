"""An activation's gradient feeding a BatchNormalizationGrad -> BatchNormActivationGrad.

    dY = ReluGrad(dZ, A)  (HardSwishGrad, ClipGrad)          ->  dX, dscale, dbias =
    dX, dscale, dbias = BatchNormalizationGrad(dY, X, ...)         BatchNormActivationGrad(dZ, A, X, ...)

A BatchNormalization followed by its activation (ResNet's ReLU, MobileNetV2's ReLU6 as Clip,
MobileNetV3's HardSwish) differentiates into these two nodes; fused, the activation's gradient is
made a block of channels at a time where both of BatchNormalizationGrad's passes read it
(ext/batchnorm.h), never written out as a tensor of X's shape.  The rule fires where dY has no
reader but the BatchNormalizationGrad, is not kept, A has X's element type, and a ClipGrad's
bounds are Constant nodes' values (an absent one: no bound; an initializer may be trained).  Only the CPU has a kernel of the fused op, so
the rule leaves graphs on CUDA as they are."""
import math

from ..ops.fused import BATCH_NORM_ACTIVATIONS
from ..ops.schema import FUSED_DOMAIN, MS_DOMAIN
from .activation_grad_bias import GRADIENTS
from .rewrite import fused_node

FUSED = "BatchNormActivationGrad"


def activation_attrs(rewrite, grad):
    """The fused op's activation attributes for the activation gradient node `grad`, or None
    where the kernel does not take it."""
    if (grad.op_type, grad.domain) == ("ClipGrad", FUSED_DOMAIN):
        bounds = []
        for index, unbounded in ((2, -math.inf), (3, math.inf)):
            name = grad.inputs[index] if len(grad.inputs) > index else ""
            value = rewrite.constant(name) if name and name not in rewrite.graph.initializers else None
            if name and (value is None or value.size != 1):
                return None
            bounds.append(unbounded if value is None else float(value.reshape(-1)[0]))
        return {"activation": "Clip", "activation_params": bounds}
    if grad.domain == MS_DOMAIN and GRADIENTS.get(grad.op_type) in BATCH_NORM_ACTIVATIONS:
        return {"activation": GRADIENTS[grad.op_type]}
    return None


def _activation_gradient(rewrite, bn_grad):
    """(the activation gradient node whose dX only `bn_grad` reads, as its dY, its activation
    attributes), or None."""
    dy = bn_grad.inputs[0]
    grad = rewrite.producers.get(dy)
    if grad is None or not rewrite.only_read_by(dy, bn_grad) or dy in bn_grad.inputs[1:]:
        return None
    attrs = activation_attrs(rewrite, grad)
    if attrs is None or rewrite.types[grad.inputs[1]].dtype != rewrite.types[bn_grad.inputs[1]].dtype:
        return None
    return grad, attrs


def apply(rewrite):
    for bn_grad in [n for n in rewrite.graph.nodes if (n.op_type, n.domain) == ("BatchNormalizationGrad", MS_DOMAIN)]:
        found = _activation_gradient(rewrite, bn_grad)
        if found is None or not rewrite.can_fuse([found[0], bn_grad], FUSED, FUSED_DOMAIN):
            continue
        grad, attrs = found
        fused = fused_node(FUSED, FUSED_DOMAIN, [grad.inputs[0], grad.inputs[1], *bn_grad.inputs[1:]],
                           list(bn_grad.outputs), {**bn_grad.attrs, **attrs}, [grad, bn_grad])
        rewrite.replace(bn_grad, fused)
        rewrite.replace(grad, None)
        rewrite.refresh()
