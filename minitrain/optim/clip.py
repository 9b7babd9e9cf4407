"""Gradient clipping by global norm, for loops that hold gradients as NumPy arrays.

The optimizers clip inside their update kernel (max_grad_norm=...); these functions do the same
computation on arrays, like torch.nn.utils.clip_grad_norm_."""
import numpy as np

from ..providers.cpu.optimizer import clip_scale
from ..providers.cpu.optimizer import global_norm as _global_norm
from ..threads import kernel_threads


def global_norm(grads):
    """L2 norm of all gradients (a dict's values or a sequence) taken together."""
    arrays = list(grads.values()) if isinstance(grads, dict) else list(grads)
    return _global_norm([np.ascontiguousarray(g) for g in arrays], kernel_threads())


def clip_grad_norm(grads, max_norm):
    """Scale the gradients in place so that their global norm is at most max_norm; return the
    norm before clipping."""
    if max_norm <= 0:
        raise ValueError(f"clip_grad_norm: max_norm must be > 0, got {max_norm!r}")
    arrays = list(grads.values()) if isinstance(grads, dict) else list(grads)
    norm = global_norm(arrays)
    scale = clip_scale(norm, max_norm)
    if scale < 1:
        for g in arrays:
            g *= g.dtype.type(scale)
    return norm
