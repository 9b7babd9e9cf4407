"""SoftmaxCrossEntropyLoss + SoftmaxCrossEntropyLossGrad -> SoftmaxCrossEntropyLossWithGrad.

The gradient node reads the loss node's log_prob, labels and weights with the same attributes,
and a seed dY that no node computes (the constant 1 of the training graph, or a fed scale):
the fused node yields the loss and d_logits in one pass, and log_prob is never stored."""
from ..ops.schema import FUSED_DOMAIN, MS_DOMAIN, ONNX_DOMAIN
from .rewrite import fused_node

FUSED = "SoftmaxCrossEntropyLossWithGrad"


def _weights(node, index):
    return node.inputs[index] if len(node.inputs) > index else ""


def apply(rewrite):
    for grad in [n for n in rewrite.graph.nodes if (n.op_type, n.domain) == ("SoftmaxCrossEntropyLossGrad", MS_DOMAIN)]:
        dy, log_prob, labels = grad.inputs[:3]
        loss = rewrite.producers.get(log_prob)
        if loss is None or (loss.op_type, loss.domain) != ("SoftmaxCrossEntropyLoss", ONNX_DOMAIN):
            continue
        if (len(loss.outputs) < 2 or loss.outputs[1] != log_prob or loss.inputs[1] != labels
                or _weights(loss, 2) != _weights(grad, 3) or loss.attrs != grad.attrs):
            continue
        if dy in rewrite.producers or not rewrite.only_read_by(log_prob, grad):
            continue
        if not rewrite.can_fuse([loss, grad], FUSED, FUSED_DOMAIN):
            continue
        inputs = [loss.inputs[0], labels, dy] + ([_weights(loss, 2)] if _weights(loss, 2) else [])
        fused = fused_node(FUSED, FUSED_DOMAIN, inputs, [loss.outputs[0], grad.outputs[0]], loss.attrs, [loss, grad])
        rewrite.replace(loss, fused)
        rewrite.replace(grad, None)
        rewrite.refresh()
