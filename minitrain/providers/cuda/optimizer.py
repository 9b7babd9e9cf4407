"""CUDA kernels of SGDOptimizer and AdamOptimizer (cuda/optimizer.cu): every parameter updated
in place by one multi-tensor launch, the same registrations and formulas as
providers/cpu/optimizer.py.

The learning rate (and Adam's step) are read by the kernels from device memory, where Adam's
bias corrections are worked out too: a captured step (CUDA Graph) follows the learning-rate
schedule and the step count.  The global gradient norm is reduced on the device in double
(per-chunk partial sums, then one block that also writes clip_grad_norm_'s scale), and the
update kernel reads that scale from device memory: no step waits for the GPU, and `grad_norm`
stays a device scalar.  The table of tensor addresses that a launch walks is cached per
provider by content, so a training loop whose buffers come back at the same addresses copies
nothing to the device per step.  Parameter groups reach the kernels as one learning rate per
parameter (the `learning_rate` input) and a cached device array of per-parameter decays.
A float16 or bfloat16 gradient of a float32 parameter is read as it is, each element widened to
float32 in the kernel: its row of the table names the gradient's type (GRADIENT_TYPE_CODES).
"""
from __future__ import annotations

import collections

import numpy as np

from ...bfloat16 import BFLOAT16_TYPES
from ...ops.optimizer import tensor_groups
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .driver import device_ptr
from .launch import BLOCK, GRAD_BF16, GRAD_HALF, MAX_BLOCK, TABLE_COLS

MIN_CHUNK, MAX_CHUNK = 2048, 32768     # elements per block of a multi-tensor launch
BLOCKS_PER_SM = 4
CACHED_TABLES = 16
SQ_NORM = Kernel("optimizer", "mt_sq_norm", "PqqP")
NORM_FINISH = Kernel("optimizer", "mt_norm_finish", "PqPPdi")
SGD = Kernel("optimizer", "mt_sgd", "PqqPPqPTTi")
ADAM = Kernel("optimizer", "mt_adam", "PqqPddTdiPPqPii")
# A row's gradient type where it is not the parameter's own (multi_tensor.cuh's with_gradient).
GRADIENT_TYPE_CODES = {np.dtype(np.float16): GRAD_HALF, **{t: GRAD_BF16 for t in BFLOAT16_TYPES}}

def chunk_size(provider, elements):
    """Elements per block: small enough that a small model's update still spreads over every
    multiprocessor, large enough that a big one's blocks are few (a power of two)."""
    wanted = elements // (BLOCKS_PER_SM * provider.multiprocessors)
    return min(MAX_CHUNK, max(MIN_CHUNK, 1 << max(wanted - 1, 0).bit_length()))


def tensor_table(provider, columns):
    """The device table of a multi-tensor launch over `columns` (lists of GPUArrays or None:
    params, grads, state 1, state 2), its block count and the elements per block; each row
    names its gradient's type where it differs from the parameter's."""
    params = columns[0]
    chunk = chunk_size(provider, sum(p.size for p in params))
    rows = np.zeros((len(params), TABLE_COLS), np.int64)
    for j, column in enumerate(columns):
        rows[:, j] = [0 if t is None else device_ptr(t) for t in column]
    rows[:, 4] = [p.size for p in params]
    rows[:, 5] = [0 if g is None or g.dtype == p.dtype else GRADIENT_TYPE_CODES[np.dtype(g.dtype)]
                  for p, g in zip(params, columns[1])]
    pairs = np.array([(k, start) for k, p in enumerate(params) for start in range(0, p.size, chunk)],
                     np.int64).reshape(-1, 2)
    table = np.concatenate([rows.reshape(-1), pairs.reshape(-1)])
    return cached_device_array(provider, "optimizer tables", table), len(pairs), chunk


def cached_device_array(provider, kind, values):
    """A persistent device copy of `values`, cached per provider by content (so a training
    loop copies nothing per step) and kept alive by a capture that reads it on every replay."""
    cache = provider.cache.get(kind, collections.OrderedDict)
    key = values.tobytes()
    device = cache.get(key)
    if device is None:
        device = cache[key] = provider.persistent_from_numpy(values)
        if len(cache) > CACHED_TABLES:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    if provider.capture is not None:
        provider.capture.keep.append(device)
    return device


def group_settings(ctx):
    """(lr_stride, decays) of parameter groups: a stride of 1 where `learning_rate` holds one
    rate per parameter, else 0; the device array of per-parameter weight decays (float64), or 0
    (a null pointer) where the `weight_decay` attribute serves every parameter."""
    lr_stride = int(ctx.inputs[0].size > 1)
    decays = ctx.attrs.get("weight_decays")
    if not decays:
        return lr_stride, 0
    return lr_stride, cached_device_array(ctx.provider, "optimizer decays", np.asarray(decays, np.float64))


def global_norm(ctx, table, tensors, blocks, chunk):
    """Queue the global gradient norm (into the `grad_norm` output when wanted), the clipping
    scale and the update's go-ahead (0 under skip_non_finite when the norm is inf or NaN);
    returns (outputs, the device scale or 0 when the update needs none)."""
    prov, max_norm, skip = ctx.provider, ctx.attrs["max_norm"], int(bool(ctx.attrs["skip_non_finite"]))
    if not ctx.wants("grad_norm") and max_norm == 0 and not skip:
        return {}, 0
    partial = prov.empty((blocks,), np.float64)
    if blocks:
        SQ_NORM.launch(prov, ctx.dtype, (blocks, 1, 1), (BLOCK, 1, 1), table, tensors, chunk, partial)
    grad_norm = prov.empty((), ctx.dtype)
    scale = prov.empty((2,), np.float64)
    NORM_FINISH.launch(prov, ctx.dtype, (1, 1, 1), (MAX_BLOCK, 1, 1), partial, blocks, grad_norm, scale, max_norm,
                       skip)
    return {"grad_norm": grad_norm}, (scale if max_norm > 0 or skip else 0)


@register_kernel("SGDOptimizer", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def sgd(ctx):
    a = ctx.attrs
    tensors = ctx.inputs[1:]
    momentum = a["momentum"]
    count = tensor_groups(len(tensors), 3 if momentum else 2)
    params, grads = tensors[:count], tensors[count:2 * count]
    buffers = tensors[2 * count:] if momentum else [None] * count
    table, blocks, chunk = tensor_table(ctx.provider, [params, grads, buffers, [None] * count])
    outputs, scale = global_norm(ctx, table, count, blocks, chunk)
    if blocks:
        lr_stride, decays = group_settings(ctx)
        SGD.launch(ctx.provider, ctx.dtype, (blocks, 1, 1), (BLOCK, 1, 1), table, count, chunk, scale,
                   ctx.inputs[0], lr_stride, decays, momentum, a["weight_decay"], int(bool(a["nesterov"])))
    return outputs


@register_kernel("AdamOptimizer", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def adam(ctx):
    """The step count (from 1) is read on the device; the CPU kernel checks its range."""
    a = ctx.attrs
    tensors = ctx.inputs[2:]
    count = tensor_groups(len(tensors), 4)
    table, blocks, chunk = tensor_table(ctx.provider, [tensors[k * count:(k + 1) * count] for k in range(4)])
    outputs, scale = global_norm(ctx, table, count, blocks, chunk)
    if blocks:
        lr_stride, decays = group_settings(ctx)
        ADAM.launch(ctx.provider, ctx.dtype, (blocks, 1, 1), (BLOCK, 1, 1), table, count, chunk, scale,
                    a["beta1"], a["beta2"], a["epsilon"], a["weight_decay"], int(bool(a["decoupled_weight_decay"])),
                    ctx.inputs[0], ctx.inputs[1], lr_stride, decays, int(a["adam_mode"]), 1)
    return outputs
