"""CUDA kernels of Dropout and DropoutGrad (cuda/dropout.cu), registered as the CPU's are
(providers/cpu/dropout.py); ratio and training_mode are read from host memory.

The mask comes from Philox4x32-10 in the kernel, keyed by a 64-bit seed per call (in device
memory, through `provider.uploaded`, so a captured step draws a new one per replay): the node's
`seed` attribute when it has one (every call then draws the same mask), else a number drawn
from minitrain's global generator (minitrain.random), so minitrain.random.seed(s) makes a GPU
run reproducible and checkpoints that save the generator's state resume it.  The mask is not
the CPU's: the CPU draws NumPy uniforms, the GPU Philox words, so the same seed keeps other
elements on each provider (the kept fraction and the scaling are the same).
"""
import numpy as np
import pycuda.driver as driver

from ... import random as mt_random
from ...ops.dropout import dropout_settings
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel

_dropout = Kernel("dropout", "dropout", "PPPqTPI")
_dropout_grad = Kernel("dropout", "dropout_grad", "PPPqT")


def _seed(fixed):
    """The call's Philox key as [low word, high word]: the node's `seed` attribute, else a draw
    from minitrain's global generator."""
    seed = fixed if fixed is not None else int(mt_random.generator().integers(0, 2 ** 64, dtype=np.uint64))
    seed = int(seed) & (2 ** 64 - 1)
    return np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32)


def _threshold(ratio):
    """The 32-bit word at or above which an element is kept: P(keep) = 1 - ratio."""
    return min(int(round(ratio * 2 ** 32)), 2 ** 32 - 1)


def _copy(provider, x):
    y = provider.empty(x.shape, x.dtype)
    provider.copy_into(y, x)
    return y


@register_kernel("Dropout", since=12, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(1, 2))
def dropout(ctx):
    x, ratio, training_mode = (ctx.inputs + [None, None])[:3]
    r, training = dropout_settings(ctx, ratio, training_mode)
    provider = ctx.provider
    mask = provider.empty(x.shape, np.bool_) if ctx.wants("mask") else None
    if not training or r == 0:
        if mask is not None and mask.size:
            driver.memset_d8_async(mask.gpudata, 1, mask.size, provider.stream)
        return {"output": _copy(provider, x), "mask": mask}
    y = provider.empty(x.shape, x.dtype)
    groups = -(-x.size // 4)
    fixed = ctx.attrs.get("seed")
    seed = provider.uploaded(lambda: _seed(fixed), (2,), np.uint32)
    _dropout.launch_elements(provider, x.dtype, groups, x, y, 0 if mask is None else mask, x.size, 1 / (1 - r),
                             seed, _threshold(r))
    return {"output": y, "mask": mask}


@register_kernel("DropoutGrad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(2, 3))
def dropout_grad(ctx):
    dy, mask, ratio, training_mode = (ctx.inputs + [None, None])[:4]
    r, training = dropout_settings(ctx, ratio, training_mode)
    if not training or r == 0:
        return {"dX": _copy(ctx.provider, dy)}
    dx = ctx.provider.empty(dy.shape, dy.dtype)
    _dropout_grad.launch_elements(ctx.provider, dy.dtype, dy.size, dy, mask, dx, dy.size, 1 / (1 - r))
    return {"dX": dx}
