"""SoftmaxCrossEntropyLoss (ONNX 12/13) and its gradient, as ONNX Runtime builds it: the
forward also yields log_prob, which SoftmaxCrossEntropyLossGrad (com.microsoft) reads."""
import numpy as np

from .gradients import gradient
from .schema import MS_DOMAIN, Attr, Input, schema

LABEL_TYPES = (np.int64, np.int32)
SCE_ATTRS = {"reduction": Attr("string", "mean"), "ignore_index": Attr("int")}


def check_sce(ctx, scores_shape, labels_shape):
    if ctx.attrs["reduction"] not in ("mean", "sum", "none"):
        ctx.attr_fail("reduction", "must be one of 'mean', 'sum', 'none'")
    if scores_shape is None or labels_shape is None:
        return
    if len(scores_shape) < 2:
        ctx.fail(f"input 'scores' must be (N, C, ...), got shape {tuple(scores_shape)}")
    expected = (scores_shape[0],) + tuple(scores_shape[2:])
    if len(labels_shape) != len(expected) or any(
            isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(labels_shape, expected)):
        ctx.fail(f"input 'labels' has shape {tuple(labels_shape)}; scores {tuple(scores_shape)} need {expected}")


def check_class_weights(ctx, i, scores_shape):
    """The optional class weights (input i) are (C,)."""
    channels = None if scores_shape is None or len(scores_shape) < 2 else scores_shape[1]
    ctx.require_shape(i, (channels,), "one weight per class")


def infer_sce(ctx):
    """loss: a scalar (mean/sum) or the per-sample shape (none); log_prob: like scores."""
    scores, labels = ctx.shape(0), ctx.shape(1)
    check_sce(ctx, scores, labels)
    check_class_weights(ctx, 2, scores)
    loss_shape = labels if ctx.attrs["reduction"] == "none" else ()
    return [ctx.out(loss_shape), ctx.out(scores)]


for _v in (12, 13):
    schema("SoftmaxCrossEntropyLoss", since=_v,
           inputs=["scores", Input("labels", types=LABEL_TYPES), Input("weights", optional=True)],
           outputs=["output", "log_prob"], attrs=SCE_ATTRS, optional_outputs=("log_prob",))(infer_sce)


@schema("SoftmaxCrossEntropyLossGrad", domain=MS_DOMAIN,
        inputs=["dY", "log_prob", Input("label", types=LABEL_TYPES), Input("weight", optional=True)],
        outputs=["d_logits"], attrs=SCE_ATTRS)
def infer_sce_grad(ctx):
    """d_logits like log_prob; dY has the loss's shape, weight is (C,)."""
    check_sce(ctx, ctx.shape(1), ctx.shape(2))
    check_class_weights(ctx, 3, ctx.shape(1))
    if ctx.attrs["reduction"] == "none":
        ctx.require_shape(0, ctx.shape(2), "the labels' shape, as the loss of reduction 'none'")
    else:
        ctx.require_scalar(0, f"the loss of reduction {ctx.attrs['reduction']!r} is a scalar")
    return [ctx.out(ctx.shape(1))]


@gradient("SoftmaxCrossEntropyLoss", since=12, emits=("SoftmaxCrossEntropyLossGrad",))
def sce_gradient(g):
    inputs = [g.GO(0), g.O(1), g.I(1)] + ([g.I(2)] if g.I(2) else [])
    g.node("SoftmaxCrossEntropyLossGrad", inputs, [g.GI(0)], g.attrs, domain=MS_DOMAIN)
