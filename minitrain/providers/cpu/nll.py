"""CPU kernels of NegativeLogLikelihoodLoss and its gradient (NumPy gathers and scatters)."""
import numpy as np

from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel


def _target_weights(ctx, log_prob, target, weight):
    """(input as (N, C, D), target as (N, D) with ignored entries pointing at class 0, and the
    per-entry weight: the class weight (1 without weights), 0 where ignored).  Raises naming
    the first target outside [0, C) that is not ignore_index."""
    n, c = log_prob.shape[0], log_prob.shape[1]
    x = log_prob.reshape(n, c, int(np.prod(log_prob.shape[2:], dtype=np.int64)))
    t = target.astype(np.int64).reshape(n, x.shape[2])
    ignore = ctx.attrs.get("ignore_index")
    active = t != ignore if ignore is not None else np.ones(t.shape, dtype=bool)
    bad = active & ((t < 0) | (t >= c))
    if bad.any():
        ctx.fail(f"input 'target' holds {int(t[bad][0])}, outside [0, {c}) (ignore_index={ignore})")
    t = np.where(active, t, 0)
    w = weight[t] if weight is not None else np.ones(t.shape, dtype=ctx.dtype)
    return x, t, np.where(active, w, 0).astype(ctx.dtype)


@register_kernel("NegativeLogLikelihoodLoss", since=12)
def nll_loss(ctx):
    log_prob, target, weight = (ctx.inputs + [None])[:3]
    x, t, w = _target_weights(ctx, log_prob, target, weight)
    losses = -np.take_along_axis(x, t[:, None, :], axis=1)[:, 0, :] * w
    reduction = ctx.attrs["reduction"]
    if reduction == "none":
        return {"loss": losses.reshape(target.shape)}
    total = losses.sum(dtype=ctx.dtype)
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            total = total / w.sum(dtype=ctx.dtype)
    return {"loss": np.array(total, dtype=ctx.dtype)}


@register_kernel("NegativeLogLikelihoodLossGrad", domain=MS_DOMAIN)
def nll_loss_grad(ctx):
    dy, log_prob, target, weight = (ctx.inputs + [None])[:4]
    x, t, w = _target_weights(ctx, log_prob, target, weight)
    reduction = ctx.attrs["reduction"]
    if reduction == "none":
        coef = w * dy.reshape(w.shape)
    elif reduction == "sum":
        coef = w * dy.reshape(())
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            coef = w * (dy.reshape(()) / w.sum(dtype=ctx.dtype))
    dx = np.zeros(x.shape, dtype=ctx.dtype)
    np.put_along_axis(dx, t[:, None, :], -coef[:, None, :].astype(ctx.dtype), axis=1)
    return {"dX": dx.reshape(log_prob.shape)}
