"""CPU kernels of SoftmaxCrossEntropyLoss and its gradient."""
import numpy as np

from ..._ext import loss as _loss
from ..._ext import softmax as _sm
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from ...threads import get_num_threads


def _as_ncd(scores, labels):
    """Views of scores as (N, C, D) and labels as (N, D), D the product of extra dims."""
    n, c = scores.shape[0], scores.shape[1]
    d = int(np.prod(scores.shape[2:], dtype=np.int64))
    return scores.reshape(n, c, d), np.ascontiguousarray(labels, dtype=np.int64).reshape(n, d)


def sample_weights(ctx, labels, num_classes, weights):
    """Per-sample weight: the class weight of its label (1 without weights), 0 where ignored.
    Raises naming the op when a label is out of range."""
    ignore = ctx.attrs.get("ignore_index")
    active = labels != ignore if ignore is not None else np.ones(labels.shape, dtype=bool)
    bad = active & ((labels < 0) | (labels >= num_classes))
    if bad.any():
        ctx.fail(f"input 'labels' holds {int(labels[bad][0])}, outside [0, {num_classes}) "
                 f"(ignore_index={ignore})")
    safe = np.where(active, labels, 0)
    w = weights[safe] if weights is not None else np.ones(labels.shape, dtype=ctx.dtype)
    return np.where(active, w, 0).astype(ctx.dtype)


@register_kernel("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy(ctx):
    scores, labels, weights = (ctx.inputs + [None])[:3]
    s, lab = _as_ncd(scores, labels)
    log_prob = np.empty_like(s)
    if s.size:
        _sm.softmax(s.reshape(-1), log_prob.reshape(-1), s.shape[0], s.shape[1], s.shape[2], True,
                    get_num_threads())
    w = sample_weights(ctx, lab, s.shape[1], weights)
    # ignored samples (weight 0) may hold any label: read class 0 for them, then zero them
    picked = np.take_along_axis(log_prob, np.where(w != 0, lab, 0)[:, None, :], axis=1)[:, 0, :]
    nll = np.where(w != 0, -picked * w, 0)
    reduction = ctx.attrs["reduction"]
    if reduction == "none":
        loss = nll.reshape(labels.shape)
    elif reduction == "sum":
        loss = np.array(nll.sum(), dtype=ctx.dtype)
    else:
        loss = np.array(nll.sum() / w.sum(), dtype=ctx.dtype)
    return {"output": loss, "log_prob": log_prob.reshape(scores.shape)}


@register_kernel("SoftmaxCrossEntropyLossGrad", domain=MS_DOMAIN)
def softmax_cross_entropy_grad(ctx):
    dy, log_prob, labels, weights = (ctx.inputs + [None])[:4]
    lp, lab = _as_ncd(log_prob, labels)
    w = sample_weights(ctx, lab, lp.shape[1], weights)
    reduction = ctx.attrs["reduction"]
    if reduction == "none":
        coef = w * dy.reshape(w.shape)
    elif reduction == "sum":
        coef = w * dy.reshape(())
    else:
        coef = w * (dy.reshape(()) / w.sum())
    out = np.empty_like(lp)
    _loss.softmax_cross_entropy_grad(lp, lab, np.ascontiguousarray(coef, dtype=ctx.dtype), out,
                                     get_num_threads())
    return {"d_logits": out.reshape(log_prob.shape)}
