"""CPU kernels of SoftmaxCrossEntropyLoss and its gradient."""
import numpy as np

from ..._ext import loss as _loss
from ..._ext import softmax as _sm
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from ...threads import kernel_threads


def _as_ncd(scores, labels):
    """Views of scores as (N, C, D) and labels as (N, D), D the product of extra dims."""
    n, c = scores.shape[0], scores.shape[1]
    d = int(np.prod(scores.shape[2:], dtype=np.int64))
    return scores.reshape(n, c, d), np.ascontiguousarray(labels, dtype=np.int64).reshape(n, d)


def sample_weights(ctx, labels, num_classes, weights):
    """Per-sample weight: the class weight of its label (1 without weights), 0 where ignored;
    None when every sample weighs 1 (no class weights, no ignore_index), the common case,
    which the kernels then skip.  Raises naming the op when a label is out of range."""
    ignore = ctx.attrs.get("ignore_index")
    if weights is None and ignore is None:
        if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
            _fail_label(ctx, labels, labels, num_classes, ignore)
        return None
    active = labels != ignore if ignore is not None else np.ones(labels.shape, dtype=bool)
    bad = active & ((labels < 0) | (labels >= num_classes))
    if bad.any():
        _fail_label(ctx, labels, bad, num_classes, ignore)
    safe = np.where(active, labels, 0)
    w = weights[safe] if weights is not None else np.ones(labels.shape, dtype=ctx.dtype)
    return np.where(active, w, 0).astype(ctx.dtype)


def _fail_label(ctx, labels, bad, num_classes, ignore):
    """Raise naming the first label outside [0, num_classes) among those marked `bad` (labels
    themselves: the first out of range)."""
    if bad is labels:
        bad = (labels < 0) | (labels >= num_classes)
    ctx.fail(f"input 'labels' holds {int(labels[bad][0])}, outside [0, {num_classes}) "
             f"(ignore_index={ignore})")


@register_kernel("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy(ctx):
    scores, labels, weights = (ctx.inputs + [None])[:3]
    s, lab = _as_ncd(scores, labels)
    log_prob = np.empty_like(s)
    if s.size:
        _sm.softmax(s.reshape(-1), log_prob.reshape(-1), s.shape[0], s.shape[1], s.shape[2], True,
                    kernel_threads())
    w = sample_weights(ctx, lab, s.shape[1], weights)
    if w is None:           # every sample counts once: the weighted sums below with w = 1
        nll = -np.take_along_axis(log_prob, lab[:, None, :], axis=1)[:, 0, :]
        count = ctx.dtype.type(lab.size)
    else:
        # ignored samples (weight 0) may hold any label: read class 0 for them, then zero them
        picked = np.take_along_axis(log_prob, np.where(w != 0, lab, 0)[:, None, :], axis=1)[:, 0, :]
        nll = np.where(w != 0, -picked * w, 0)
        count = w.sum()
    reduction = ctx.attrs["reduction"]
    if reduction == "none":
        loss = nll.reshape(labels.shape)
    elif reduction == "sum":
        loss = np.array(nll.sum(), dtype=ctx.dtype)
    else:
        loss = np.array(nll.sum() / count, dtype=ctx.dtype)
    return {"output": loss, "log_prob": log_prob.reshape(scores.shape)}


@register_kernel("SoftmaxCrossEntropyLossGrad", domain=MS_DOMAIN)
def softmax_cross_entropy_grad(ctx):
    dy, log_prob, labels, weights = (ctx.inputs + [None])[:4]
    lp, lab = _as_ncd(log_prob, labels)
    w = sample_weights(ctx, lab, lp.shape[1], weights)
    reduction = ctx.attrs["reduction"]
    if w is None:           # every sample counts once: the products below with w = 1
        if reduction == "none":
            coef = dy.reshape(lab.shape)
        else:
            scale = dy.reshape(()) if reduction == "sum" else dy.reshape(()) / ctx.dtype.type(lab.size)
            coef = np.full(lab.shape, scale, dtype=ctx.dtype)
    elif reduction == "none":
        coef = w * dy.reshape(w.shape)
    elif reduction == "sum":
        coef = w * dy.reshape(())
    else:
        coef = w * (dy.reshape(()) / w.sum())
    out = np.empty_like(lp)
    _loss.softmax_cross_entropy_grad(lp, lab, np.ascontiguousarray(coef, dtype=ctx.dtype), out,
                                     kernel_threads())
    return {"d_logits": out.reshape(log_prob.shape)}
