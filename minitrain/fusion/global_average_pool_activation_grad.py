"""A global average pool's gradient feeding an activation's gradient -> GlobalAveragePoolActivationGrad.

    dZ = ReluGrad(GlobalAveragePoolGrad(dP, shape), Y)          ->  dZ, dB =
    dZ, dB = ActivationGradBias(AveragePoolGrad(dP), Y)               GlobalAveragePoolActivationGrad(dP, Y)

The pooled gradient dP (N, C, 1, ...) is spread over the plane inside the fused kernel, so the
tensor of X's shape holding dP / plane size is never written nor read back.  The pool gradient is
GlobalAveragePoolGrad, or AveragePoolGrad whose one window is the whole plane (kernel_shape =
the plane, no padding or dilation), and its dX has no reader but the activation's gradient.  The
activation's gradient is a plain one (ReluGrad, ...) or an ActivationGradBias that the earlier
rule made of one and a bias gradient, whose dB the fused node then gives too.

The rule applies where the provider's kernel of the fused op is not a reference kernel (CUDA's):
the CPU's spreads dP in memory as the unfused nodes do."""
from ..ops.schema import FUSED_DOMAIN, MS_DOMAIN, ONNX_DOMAIN
from .activation_grad_bias import FUSED as ACTIVATION_GRAD_BIAS
from .activation_grad_bias import GRADIENTS, gradient_attrs
from .rewrite import fused_node

FUSED = "GlobalAveragePoolActivationGrad"


def whole_plane(pool_grad, shape):
    """Whether the AveragePoolGrad node's one window covers each plane of its dX `shape`."""
    attrs = pool_grad.attrs
    if shape is None or not all(isinstance(d, int) for d in shape[2:]):
        return False
    return (list(attrs.get("kernel_shape") or []) == list(shape[2:])
            and all(p == 0 for p in attrs.get("pads") or [])
            and all(d == 1 for d in attrs.get("dilations") or [])
            and (attrs.get("auto_pad") or "NOTSET") in ("NOTSET", "VALID"))


def _pool_gradient(rewrite, grad):
    """The global average pool gradient node whose dX only `grad` reads, or None."""
    spread = grad.inputs[0]
    back = rewrite.producers.get(spread)
    if back is None or not rewrite.only_read_by(spread, grad):
        return None
    kind = (back.op_type, back.domain)
    if kind == ("GlobalAveragePoolGrad", MS_DOMAIN):
        return back
    if kind == ("AveragePoolGrad", ONNX_DOMAIN) and whole_plane(back, rewrite.types[spread].shape):
        return back
    return None


def _fused_attrs(grad):
    """The activation attributes of an activation gradient node or of an ActivationGradBias."""
    return dict(grad.attrs) if grad.op_type == ACTIVATION_GRAD_BIAS else gradient_attrs(grad)


def apply(rewrite):
    for grad in [n for n in rewrite.graph.nodes if (n.op_type in GRADIENTS and n.domain == MS_DOMAIN)
                 or (n.op_type, n.domain) == (ACTIVATION_GRAD_BIAS, FUSED_DOMAIN)]:
        back = _pool_gradient(rewrite, grad)
        if back is None or not rewrite.can_fuse([back, grad], FUSED, FUSED_DOMAIN):
            continue
        fused = fused_node(FUSED, FUSED_DOMAIN, [back.inputs[0], grad.inputs[1]], list(grad.outputs),
                           _fused_attrs(grad), [back, grad])
        rewrite.replace(grad, fused)
        rewrite.replace(back, None)
        rewrite.refresh()
