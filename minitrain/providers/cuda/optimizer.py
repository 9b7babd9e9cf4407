"""CUDA kernels of SGDOptimizer and AdamOptimizer (cuda/optimizer.cu): every parameter updated
in place by one multi-tensor launch, the same registrations and formulas as
providers/cpu/optimizer.py.

The learning rate (and Adam's step) are host-resident, so the per-step constants (Adam's bias
corrections) are computed here.  The global gradient norm is reduced on the device in double
(per-chunk partial sums, then one block that also writes clip_grad_norm_'s scale), and the
update kernel reads that scale from device memory: no step waits for the GPU, and `grad_norm`
stays a device scalar.  The table of tensor addresses that a launch walks is cached per
provider by content, so a training loop whose buffers come back at the same addresses copies
nothing to the device per step.
"""
from __future__ import annotations

import collections
import math
import weakref

import numpy as np

from ...ops.optimizer import tensor_groups
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import BLOCK, Kernel
from .runtime import device_ptr

FLOATS = (np.float16, np.float32, np.float64)
CHUNK = 32768           # elements per block of a multi-tensor launch
TABLE_COLS = 5          # cuda/optimizer.cu's TABLE_COLS: param, grad, state 1, state 2, count
CACHED_TABLES = 16
SQ_NORM = Kernel("optimizer", "mt_sq_norm", "PqqP")
NORM_FINISH = Kernel("optimizer", "mt_norm_finish", "PqPPd")
SGD = Kernel("optimizer", "mt_sgd", "PqqPTTTi")
ADAM = Kernel("optimizer", "mt_adam", "PqqPTTTTTTT")

_tables = weakref.WeakKeyDictionary()


def tensor_table(provider, columns):
    """The device table of a multi-tensor launch over `columns` (lists of GPUArrays or None:
    params, grads, state 1, state 2) and its block count."""
    params = columns[0]
    rows = np.zeros((len(params), TABLE_COLS), np.int64)
    for j, column in enumerate(columns):
        rows[:, j] = [0 if t is None else device_ptr(t) for t in column]
    rows[:, 4] = [p.size for p in params]
    pairs = np.array([(k, start) for k, p in enumerate(params) for start in range(0, p.size, CHUNK)],
                     np.int64).reshape(-1, 2)
    table = np.concatenate([rows.reshape(-1), pairs.reshape(-1)])
    cache = _tables.setdefault(provider, collections.OrderedDict())
    key = table.tobytes()
    device = cache.get(key)
    if device is None:
        device = cache[key] = provider.from_numpy(table)
        if len(cache) > CACHED_TABLES:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return device, len(pairs)


def global_norm(ctx, table, tensors, blocks):
    """Queue the global gradient norm (into the `grad_norm` output when wanted) and the
    clipping scale; returns (outputs, the device scale or 0 when the update needs none)."""
    prov, max_norm = ctx.provider, ctx.attrs["max_norm"]
    if not ctx.wants("grad_norm") and max_norm == 0:
        return {}, 0
    partial = prov.empty((blocks,), np.float64)
    if blocks:
        SQ_NORM.launch(prov, ctx.dtype, (blocks, 1, 1), (BLOCK, 1, 1), table, tensors, CHUNK, partial)
    grad_norm = prov.empty((), ctx.dtype)
    scale = prov.empty((1,), np.float64)
    NORM_FINISH.launch(prov, ctx.dtype, (1, 1, 1), (1024, 1, 1), partial, blocks, grad_norm, scale, max_norm)
    return {"grad_norm": grad_norm}, (scale if max_norm > 0 else 0)


@register_kernel("SGDOptimizer", domain=MS_DOMAIN, provider="cuda", dtypes=FLOATS, host_inputs=(0,))
def sgd(ctx):
    a = ctx.attrs
    tensors = ctx.inputs[1:]
    momentum = a["momentum"]
    count = tensor_groups(len(tensors), 3 if momentum else 2)
    params, grads = tensors[:count], tensors[count:2 * count]
    buffers = tensors[2 * count:] if momentum else [None] * count
    table, blocks = tensor_table(ctx.provider, [params, grads, buffers, [None] * count])
    outputs, scale = global_norm(ctx, table, count, blocks)
    lr = float(ctx.inputs[0].reshape(-1)[0])
    if blocks:
        SGD.launch(ctx.provider, ctx.dtype, (blocks, 1, 1), (BLOCK, 1, 1), table, count, CHUNK, scale,
                   lr, momentum, a["weight_decay"], int(bool(a["nesterov"])))
    return outputs


@register_kernel("AdamOptimizer", domain=MS_DOMAIN, provider="cuda", dtypes=FLOATS, host_inputs=(0, 1))
def adam(ctx):
    a = ctx.attrs
    tensors = ctx.inputs[2:]
    count = tensor_groups(len(tensors), 4)
    step = int(ctx.inputs[1].reshape(-1)[0])
    if step < 1:
        ctx.fail(f"input 'step' is {step}; it counts updates from 1")
    table, blocks = tensor_table(ctx.provider, [tensors[k * count:(k + 1) * count] for k in range(4)])
    outputs, scale = global_norm(ctx, table, count, blocks)
    lr = float(ctx.inputs[0].reshape(-1)[0])
    bias1, bias2 = 1 - a["beta1"] ** step, 1 - a["beta2"] ** step
    decoupled = bool(a["decoupled_weight_decay"])
    if blocks:
        ADAM.launch(ctx.provider, ctx.dtype, (blocks, 1, 1), (BLOCK, 1, 1), table, count, CHUNK, scale,
                    a["beta1"], a["beta2"], a["epsilon"], 0.0 if decoupled else a["weight_decay"],
                    1 - lr * a["weight_decay"] if decoupled else 1.0, lr / bias1, 1 / math.sqrt(bias2))
    return outputs
