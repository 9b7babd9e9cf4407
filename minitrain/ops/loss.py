"""SoftmaxCrossEntropyLoss (ONNX 12/13) and its gradient, as ONNX Runtime builds it: the
forward also yields log_prob, which SoftmaxCrossEntropyLossGrad (com.microsoft) reads."""
import numpy as np

from .gradients import gradient
from .schema import MS_DOMAIN, Attr, Input, schema

LABEL_TYPES = (np.int64, np.int32)
SCE_ATTRS = {"reduction": Attr("string", "mean"), "ignore_index": Attr("int")}


def check_sce(ctx, scores_index, labels_index):
    """The scores (or log_prob) are (N, C, D1...), the labels (N, D1...)."""
    if ctx.attrs["reduction"] not in ("mean", "sum", "none"):
        ctx.attr_fail("reduction", "must be one of 'mean', 'sum', 'none'")
    scores_shape = ctx.shape(scores_index)
    name = ctx.schema.inputs[scores_index].name
    if scores_shape is None:
        return
    if len(scores_shape) < 2:
        ctx.fail(f"input {name!r} must be (N, C, ...), got shape {tuple(scores_shape)}")
    ctx.require_shape(labels_index, (scores_shape[0],) + tuple(scores_shape[2:]),
                      f"input {name!r} {tuple(scores_shape)} without its class axis")


def check_class_weights(ctx, i, scores_index):
    """The optional class weights (input i) are (C,)."""
    scores_shape = ctx.shape(scores_index)
    channels = None if scores_shape is None else scores_shape[1]
    ctx.require_shape(i, (channels,), f"one weight per class of input {ctx.schema.inputs[scores_index].name!r} "
                                      f"{None if scores_shape is None else tuple(scores_shape)}")


def infer_sce(ctx):
    """loss: a scalar (mean/sum) or the per-sample shape (none); log_prob: like scores."""
    scores, labels = ctx.shape(0), ctx.shape(1)
    check_sce(ctx, 0, 1)
    check_class_weights(ctx, 2, 0)
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
    return [ctx.out(check_class_loss_grad(ctx, "the labels' shape"))]


def check_class_loss_grad(ctx, labels_shape):
    """The checks of a class-index loss's gradient (dY, scores, labels, weight?): scores and
    labels agree, weight is (C,), dY has the loss's shape (`labels_shape` names it for reduction
    'none', else a scalar).  Returns the scores' shape, dX's."""
    check_sce(ctx, 1, 2)
    check_class_weights(ctx, 3, 1)
    if ctx.attrs["reduction"] == "none":
        ctx.require_shape(0, ctx.shape(2), f"{labels_shape}, as the loss of reduction 'none'")
    else:
        ctx.require_scalar(0, f"the loss of reduction {ctx.attrs['reduction']!r} is a scalar")
    return ctx.shape(1)


@gradient("SoftmaxCrossEntropyLoss", since=12, emits=("SoftmaxCrossEntropyLossGrad",))
def sce_gradient(g):
    inputs = [g.GO(0), g.O(1), g.I(1)] + ([g.I(2)] if g.I(2) else [])
    g.node("SoftmaxCrossEntropyLossGrad", inputs, [g.GI(0)], g.attrs, domain=MS_DOMAIN)
