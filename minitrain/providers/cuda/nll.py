"""CUDA kernels of NegativeLogLikelihoodLoss and NegativeLogLikelihoodLossGrad (cuda/nll.cu),
the same registrations as providers/cpu/nll.py.  Targets are checked on the device by the
softmax cross-entropy's LabelGuard (loss.py), so no call waits for the GPU: a bad target is
raised as a ShapeError when the host next waits for the stream."""
import math

import numpy as np

from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .loss import LABEL_SUFFIX, REDUCTIONS, label_guard, reduce_rows, weight_sum

_FORWARD = {s: Kernel("nll", f"nll_forward_{s}", "PPPPPqqqqiP") for s in LABEL_SUFFIX.values()}
_GRAD = {s: Kernel("nll", f"nll_grad_{s}", "PPPPPqqqqiiP") for s in LABEL_SUFFIX.values()}


def _geometry(ctx, log_prob):
    """(N, C, D, ignore_index, has_ignore) of a call."""
    ignore = ctx.attrs.get("ignore_index")
    return (log_prob.shape[0], log_prob.shape[1], math.prod(log_prob.shape[2:]), 0 if ignore is None else ignore,
            int(ignore is not None))


@register_kernel("NegativeLogLikelihoodLoss", since=12, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def nll_loss(ctx):
    log_prob, target, weight = (ctx.inputs + [None])[:3]
    prov = ctx.provider
    guard = label_guard(prov)
    guard.check()
    n, c, d, ignore, has_ignore = _geometry(ctx, log_prob)
    rows, reduction = n * d, ctx.attrs["reduction"]
    if reduction == "none":
        loss, partial = prov.empty(target.shape, ctx.dtype), None
    else:
        loss, partial = prov.empty((), ctx.dtype), prov.empty((2, rows), np.float64)
    if rows:
        suffix = LABEL_SUFFIX[np.dtype(target.dtype)]
        _FORWARD[suffix].launch_elements(prov, ctx.dtype, rows, log_prob, target, 0 if weight is None else weight,
                                         loss if partial is None else 0, 0 if partial is None else partial, rows, c,
                                         d, ignore, has_ignore, guard.flag)
        guard.launched(ctx.who, c, ctx.attrs.get("ignore_index"))
    if partial is not None:
        reduce_rows(prov, ctx.dtype, partial, rows, reduction == "mean", loss)
    return {"loss": loss}


@register_kernel("NegativeLogLikelihoodLossGrad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def nll_loss_grad(ctx):
    dy, log_prob, target, weight = (ctx.inputs + [None])[:4]
    prov = ctx.provider
    guard = label_guard(prov)
    guard.check()
    n, c, d, ignore, has_ignore = _geometry(ctx, log_prob)
    suffix = LABEL_SUFFIX[np.dtype(target.dtype)]
    reduction = REDUCTIONS[ctx.attrs["reduction"]]
    weight = 0 if weight is None else weight
    dx = prov.empty(log_prob.shape, ctx.dtype)
    wsum = 0
    if reduction == REDUCTIONS["mean"] or (c == 0 and n * d):
        # the mean's divisor; with no classes there is no element to report a bad target from
        wsum = weight_sum(prov, ctx.dtype, target, weight, n * d, c, ignore, has_ignore, guard.flag)
    _GRAD[suffix].launch_elements(prov, ctx.dtype, dx.size, dy, target, weight, wsum, dx, n, c, d, ignore,
                                  has_ignore, reduction, guard.flag)
    if n * d:
        guard.launched(ctx.who, c, ctx.attrs.get("ignore_index"))
    return {"dX": dx}
