"""CPU kernels of SoftmaxCrossEntropyLoss, its gradient, and both in one call (the fused op).

The log-probabilities come from ext/softmax.pyx; ext/loss.pyx then takes one pass over the
labels (their check, the sample weights, the negative log-likelihoods) and, for the gradient,
one over the log-probabilities.  The loss, its gradient and the fused op share that code, so
the fused op gives the unfused nodes' bits."""
import math

import numpy as np

from ..._ext import loss as _loss
from ..._ext import softmax as _sm
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from ...threads import kernel_threads

_REDUCTIONS = {"none": 0, "sum": 1, "mean": 2}       # the codes of ext/loss.pyx


def as_ncd(scores, labels):
    """Views of scores as (N, C, D) and labels as (N, D) int64, D the product of extra dims."""
    n, c, d = scores.shape[0], scores.shape[1], math.prod(scores.shape[2:])
    return scores.reshape(n, c, d), np.ascontiguousarray(labels, dtype=np.int64).reshape(n, d)


def log_softmax(s):
    """Log-probabilities of (N, C, D) scores along C."""
    log_prob = np.empty_like(s)
    if s.size:
        _sm.softmax(s.reshape(-1), log_prob.reshape(-1), s.shape[0], s.shape[1], s.shape[2], True,
                    kernel_threads())
    return log_prob


def cross_entropy(ctx, log_prob, labels, weights, *, loss_shape=None, dy=None):
    """The loss (shaped `loss_shape`, when given) and d_logits (with dY, when given) of (N, C, D)
    log-probabilities and (N, D) labels: a dict of the two, None where not asked."""
    ignore = ctx.attrs.get("ignore_index")
    reduction = ctx.attrs["reduction"]
    nll = np.empty(labels.shape, dtype=ctx.dtype) if loss_shape is not None and reduction == "none" else None
    d_logits = np.empty_like(log_prob) if dy is not None else None
    bad, weight_sum, loss_sum = _loss.softmax_cross_entropy(
        log_prob, labels, None if weights is None else np.ascontiguousarray(weights, dtype=ctx.dtype),
        0 if ignore is None else ignore, ignore is not None, _REDUCTIONS[reduction],
        None if dy is None else dy.reshape(-1), nll, d_logits, kernel_threads())
    if bad >= 0:
        ctx.fail(f"input 'labels' holds {int(labels.reshape(-1)[bad])}, outside [0, {log_prob.shape[1]}) "
                 f"(ignore_index={ignore})")
    if loss_shape is None:
        loss = None
    elif reduction == "none":
        loss = nll.reshape(loss_shape)
    else:
        loss = np.array(loss_sum if reduction == "sum" else _mean(loss_sum, weight_sum), dtype=ctx.dtype)
    return {"output": loss, "d_logits": d_logits}


def _mean(total, count):
    """total / count, NaN for no count (every sample ignored, or none), as NumPy's 0 / 0."""
    return total / count if count else float("nan")


@register_kernel("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy(ctx):
    scores, labels, weights = (ctx.inputs + [None])[:3]
    s, lab = as_ncd(scores, labels)
    log_prob = log_softmax(s)
    loss = cross_entropy(ctx, log_prob, lab, weights, loss_shape=labels.shape)["output"]
    return {"output": loss, "log_prob": log_prob.reshape(scores.shape)}


@register_kernel("SoftmaxCrossEntropyLossGrad", domain=MS_DOMAIN)
def softmax_cross_entropy_grad(ctx):
    dy, log_prob, labels, weights = (ctx.inputs + [None])[:4]
    lp, lab = as_ncd(log_prob, labels)
    return {"d_logits": cross_entropy(ctx, lp, lab, weights, dy=dy)["d_logits"].reshape(log_prob.shape)}
