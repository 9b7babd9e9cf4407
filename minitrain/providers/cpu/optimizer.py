"""CPU kernels of SGDOptimizer and AdamOptimizer: in-place multi-tensor updates (Cython; Hugging
Face's AdamW, adam_mode 1, in NumPy).  A float16 or bfloat16 gradient of a float32 parameter is
widened to float32 as it is read (exactly), so the update is that of its float32 Cast."""
import math

import numpy as np

from ..._ext import optimizer as _opt
from ...ops.optimizer import per_parameter, tensor_groups
from ...ops.ort_optimizer import bias_corrections
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from ...threads import kernel_threads
from .ort_optimizer import adamw_update


def global_norm(grads, threads):
    """L2 norm of all gradients together, accumulated in double in a fixed order."""
    return math.sqrt(sum(_opt.squared_norm(widened(g).reshape(-1), threads) for g in grads))


def widened(grad):
    """`grad` as the kernels read it: a 16-bit gradient widened to float32 (exact), others as
    they are."""
    return grad.astype(np.float32) if grad.dtype.itemsize == 2 else grad


def clip_scale(norm, max_norm):
    """The factor clip_grad_norm_ applies: min(1, max_norm / (norm + 1e-6)); 1 when off."""
    return min(1.0, max_norm / (norm + 1e-6)) if max_norm > 0 else 1.0


def skipped(norm, attrs):
    """Whether skip_non_finite drops this update: a gradient holds inf or NaN."""
    return bool(attrs["skip_non_finite"]) and not math.isfinite(norm)


@register_kernel("SGDOptimizer", domain=MS_DOMAIN)
def sgd(ctx):
    """All parameters in one Cython call; the gradient norm comes from the update's own pass
    unless clipping or skip_non_finite needs it first."""
    a = ctx.attrs
    tensors = ctx.inputs[1:]
    momentum = a["momentum"]
    count = tensor_groups(len(tensors), 3 if momentum else 2)
    params, buffers = list(tensors[:count]), list(tensors[2 * count:])
    grads = [widened(g) for g in tensors[count:2 * count]]
    rates, decays = (np.array(v, dtype=np.float64) for v in per_parameter(ctx.inputs[0], a, count))
    threads = kernel_threads()
    update = (params, grads, buffers, rates, decays, momentum)
    if a["max_norm"] == 0 and not a["skip_non_finite"]:
        norm = math.sqrt(_opt.sgd_update_all(*update, 1.0, bool(a["nesterov"]), True, threads))
        return {"grad_norm": np.array(norm, dtype=ctx.dtype)}
    norm = global_norm(grads, threads)
    if not skipped(norm, a):
        _opt.sgd_update_all(*update, clip_scale(norm, a["max_norm"]), bool(a["nesterov"]), False, threads)
    return {"grad_norm": np.array(norm, dtype=ctx.dtype)}


@register_kernel("AdamOptimizer", domain=MS_DOMAIN)
def adam(ctx):
    a = ctx.attrs
    tensors = ctx.inputs[2:]
    count = tensor_groups(len(tensors), 4)
    params, grads = tensors[:count], tensors[count:2 * count]
    m, v = tensors[2 * count:3 * count], tensors[3 * count:]
    step = int(ctx.inputs[1].reshape(-1)[0])
    if step < 1:
        ctx.fail(f"input 'step' is {step}; it counts updates from 1")
    threads = kernel_threads()
    norm = global_norm(grads, threads)
    if skipped(norm, a):
        return {"grad_norm": np.array(norm, dtype=ctx.dtype)}
    scale = clip_scale(norm, a["max_norm"])
    rates, decays = per_parameter(ctx.inputs[0], a, count)
    if a["adam_mode"] == 1:
        _huggingface_adamw(ctx, params, grads, m, v, rates, decays, scale, step)
        return {"grad_norm": np.array(norm, dtype=ctx.dtype)}
    bias1, bias2 = 1 - a["beta1"] ** step, 1 - a["beta2"] ** step
    for k in range(count):
        _opt.adam_update(params[k].reshape(-1), widened(grads[k]).reshape(-1), m[k].reshape(-1), v[k].reshape(-1),
                         rates[k], a["beta1"], a["beta2"], a["epsilon"], decays[k],
                         bool(a["decoupled_weight_decay"]), scale, bias1, bias2, threads)
    return {"grad_norm": np.array(norm, dtype=ctx.dtype)}


def _huggingface_adamw(ctx, params, grads, m, v, rates, decays, scale, step):
    """adam_mode 1: Hugging Face's AdamW, through AdamWOptimizer's NumPy update (the gradients
    clipped first, into a scaled copy)."""
    a, dtype = ctx.attrs, np.dtype(ctx.dtype)
    corrections = bias_corrections(a["beta1"], a["beta2"], step, True, dtype)
    for k, (w, g) in enumerate(zip(params, grads)):
        g = widened(g)
        g = g * dtype.type(scale) if scale < 1 else g
        adamw_update(w, g, m[k], v[k], rates[k], a["beta1"], a["beta2"], a["epsilon"], decays[k], 1, *corrections)
