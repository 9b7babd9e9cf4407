"""CUDA kernels of SoftmaxCrossEntropyLoss and SoftmaxCrossEntropyLossGrad (cuda/loss.cu), the
same registrations as providers/cpu/loss.py.

Labels are checked on the device.  A label outside [0, C) that is not ignore_index is never
read through (its row counts as ignored) and is recorded in a flag on the device; a copy of
the flag goes to pinned host memory after each call, in stream order, and LabelGuard reads
it once that copy has landed, so no call waits for the GPU.  The error (ShapeError, the CPU
kernel's message) is raised when the host next waits for the provider's stream (fetching the
loss, run_node's results), by the next loss call on the provider, or by
`check_labels(provider)`, which waits.
"""
from __future__ import annotations

import collections
import math

import numpy as np
import pycuda.driver as driver

from ...errors import ShapeError
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .launch import BLOCK, MAX_BLOCK, WARPS_PER_BLOCK, grid_stride_blocks

LABEL_SUFFIX = {np.dtype(np.int64): "i64", np.dtype(np.int32): "i32"}
SIGNATURES = {"sce_forward_warp": "PPPPPPqqqqiP", "sce_forward_thread": "PPPPPPqqqqiP",
              "sce_weight_sum": "PPqqqiPP", "sce_grad": "PPPPPPqqqqiiP"}
KERNELS = {(name, suffix): Kernel("loss", f"{name}_{suffix}", sig)
           for name, sig in SIGNATURES.items() for suffix in LABEL_SUFFIX.values()}
REDUCE = Kernel("loss", "sce_reduce", "PqiP")
REDUCTIONS = {"none": 0, "sum": 1, "mean": 2}
ONE_BLOCK = ((1, 1, 1), (MAX_BLOCK, 1, 1))


class LabelGuard:
    """The bad-label flag of one provider and the calls whose verdict is still on its way.

    `flag` (device, int64 [set, label]) is set by a kernel that meets a bad label.  After each
    call, `launched` queues a copy of it into a slot of pinned host memory and an event; `check`
    reads the slots whose event has completed, oldest first, and raises for the first call that
    saw a bad label (then clears the flag and forgets the later calls)."""
    SLOTS = 64

    def __init__(self, provider):
        self.provider = provider
        self.flag = provider.persistent_empty((2,), np.int64)
        provider.fill_zero(self.flag)
        self.host = driver.pagelocked_zeros((self.SLOTS, 2), np.int64)
        self.events = [driver.Event(driver.event_flags.DISABLE_TIMING) for _ in range(self.SLOTS)]
        self.pending = collections.deque()      # (slot, who, num_classes, ignore_index)
        self.next_slot = 0
        provider.add_sync_check(self.check)

    def launched(self, who, num_classes, ignore_index):
        """Queue the verdict of the kernels just launched (after every replay, when they are
        being captured into a step's graph)."""
        self.provider.per_execution(lambda: self._queue_verdict(who, num_classes, ignore_index))

    def _queue_verdict(self, who, num_classes, ignore_index):
        if len(self.pending) == self.SLOTS:
            self._settle(wait=True, limit=1)
        slot, self.next_slot = self.next_slot, (self.next_slot + 1) % self.SLOTS
        driver.memcpy_dtoh_async(self.host[slot], self.flag.gpudata, self.provider.stream)
        self.events[slot].record(self.provider.stream)
        self.pending.append((slot, who, num_classes, ignore_index))

    def check(self, wait=False):
        """Raise ShapeError for a call that met a bad label, among the calls whose verdict has
        arrived (all of them when `wait`)."""
        self._settle(wait, len(self.pending))

    def _settle(self, wait, limit):
        for _ in range(limit):
            slot, who, num_classes, ignore_index = self.pending[0]
            event = self.events[slot]
            if not wait and not event.query():
                return
            event.synchronize()
            self.pending.popleft()
            if self.host[slot, 0]:
                label = int(self.host[slot, 1])
                self.pending.clear()
                self.provider.fill_zero(self.flag)
                raise ShapeError(f"{who}: input 'labels' holds {label}, outside [0, {num_classes}) "
                                 f"(ignore_index={ignore_index})")


def label_guard(provider):
    """The LabelGuard of `provider` (made on first use)."""
    return provider.cache.get("label guard", lambda: LabelGuard(provider))


def check_labels(provider):
    """Wait for the loss calls queued on `provider` and raise ShapeError if any met a label
    outside [0, C) that is not ignore_index."""
    guard = provider.cache.find("label guard")
    if guard is not None:
        guard.check(wait=True)


def _ncd(shape):
    """(N, C, D) of scores or log_prob of `shape`, D the product of the dims after C."""
    return shape[0], shape[1], math.prod(shape[2:])


def _label_args(ctx):
    ignore = ctx.attrs.get("ignore_index")
    return (0 if ignore is None else ignore), int(ignore is not None)


@register_kernel("SoftmaxCrossEntropyLoss", since=12, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def softmax_cross_entropy(ctx):
    scores, labels, weights = (ctx.inputs + [None])[:3]
    prov = ctx.provider
    guard = label_guard(prov)
    guard.check()
    n, c, d = _ncd(scores.shape)
    rows = n * d
    suffix = LABEL_SUFFIX[np.dtype(labels.dtype)]
    reduction = ctx.attrs["reduction"]
    log_prob = prov.empty(scores.shape, ctx.dtype) if ctx.wants("log_prob") else None
    if reduction == "none":
        loss, partial = prov.empty(labels.shape, ctx.dtype), None
    else:
        loss, partial = prov.empty((), ctx.dtype), prov.empty((2, rows), np.float64)
    if rows:
        args = (scores, labels, 0 if weights is None else weights, 0 if log_prob is None else log_prob,
                loss if partial is None else 0, 0 if partial is None else partial, rows, c, d,
                *_label_args(ctx), guard.flag)
        if d == 1:     # rows are contiguous: a warp per row
            blocks = grid_stride_blocks(prov, rows, WARPS_PER_BLOCK)
            KERNELS["sce_forward_warp", suffix].launch(prov, ctx.dtype, (blocks, 1, 1), (BLOCK, 1, 1), *args)
        else:          # a row's classes are D apart: a thread per row, neighbours reading neighbours
            KERNELS["sce_forward_thread", suffix].launch_elements(prov, ctx.dtype, rows, *args)
        guard.launched(ctx.who, c, ctx.attrs.get("ignore_index"))
    if partial is not None:
        REDUCE.launch(prov, ctx.dtype, *ONE_BLOCK, partial, rows, int(reduction == "mean"), loss)
    out = {"output": loss}
    if log_prob is not None:
        out["log_prob"] = log_prob
    return out


@register_kernel("SoftmaxCrossEntropyLossGrad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def softmax_cross_entropy_grad(ctx):
    dy, log_prob, labels, weights = (ctx.inputs + [None])[:4]
    prov = ctx.provider
    guard = label_guard(prov)
    guard.check()
    n, c, d = _ncd(log_prob.shape)
    suffix = LABEL_SUFFIX[np.dtype(labels.dtype)]
    reduction = REDUCTIONS[ctx.attrs["reduction"]]
    weights = 0 if weights is None else weights
    ignore, has_ignore = _label_args(ctx)
    dx = prov.empty(log_prob.shape, ctx.dtype)
    wsum = 0
    if reduction == REDUCTIONS["mean"] or (c == 0 and n * d):
        # the mean's divisor; with no classes there is no element to report a bad label from
        wsum = prov.empty((1,), np.float64)
        KERNELS["sce_weight_sum", suffix].launch(prov, ctx.dtype, *ONE_BLOCK, labels, weights, n * d, c,
                                                 ignore, has_ignore, guard.flag, wsum)
    KERNELS["sce_grad", suffix].launch_elements(prov, ctx.dtype, dx.size, dy, log_prob, labels, weights, wsum, dx,
                                                n, c, d, ignore, has_ignore, reduction, guard.flag)
    if n * d:
        guard.launched(ctx.who, c, ctx.attrs.get("ignore_index"))
    return {"d_logits": dx}
