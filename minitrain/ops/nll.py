"""NegativeLogLikelihoodLoss (ONNX 12/13): -input[n, target[n, d...], d...], weighted by the
target's class weight, summed, averaged over the weights of the targets not equal to
ignore_index (mean, the default), or left per element (none).  The input is log-probabilities
(N, C, D1...), usually LogSoftmax's output, the target int64/int32 class indices (N, D1...).

ONNX Runtime builds no gradient for it; NegativeLogLikelihoodLossGrad (com.microsoft; dY,
input, target, weight?) is minitrain's: -dY * weight[target] (/ the weight total for mean) at
each target's class, 0 elsewhere.  The input is read for its shape only.
"""
from .gradients import gradient
from .loss import LABEL_TYPES, SCE_ATTRS, check_class_loss_grad, check_class_weights, check_sce
from .schema import MS_DOMAIN, Input, schema


def infer_nll(ctx):
    """loss: a scalar (mean/sum) or the target's shape (none)."""
    check_sce(ctx, 0, 1)
    check_class_weights(ctx, 2, 0)
    return [ctx.out(ctx.shape(1) if ctx.attrs["reduction"] == "none" else ())]


for _v in (12, 13):
    schema("NegativeLogLikelihoodLoss", since=_v,
           inputs=["input", Input("target", types=LABEL_TYPES), Input("weight", optional=True)],
           outputs=["loss"], attrs=SCE_ATTRS)(infer_nll)


@schema("NegativeLogLikelihoodLossGrad", domain=MS_DOMAIN,
        inputs=["dY", "input", Input("target", types=LABEL_TYPES), Input("weight", optional=True)],
        outputs=["dX"], attrs=SCE_ATTRS)
def infer_nll_grad(ctx):
    """dX like the input; dY has the loss's shape."""
    return [ctx.out(check_class_loss_grad(ctx, "the target's shape"))]


@gradient("NegativeLogLikelihoodLoss", since=12, emits=("NegativeLogLikelihoodLossGrad",))
def nll_gradient(g):
    inputs = [g.GO(0), g.I(0), g.I(1)] + ([g.I(2)] if g.I(2) else [])
    g.node("NegativeLogLikelihoodLossGrad", inputs, [g.GI(0)], g.attrs, domain=MS_DOMAIN)
