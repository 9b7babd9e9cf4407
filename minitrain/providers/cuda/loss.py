"""CUDA kernels of SoftmaxCrossEntropyLoss and SoftmaxCrossEntropyLossGrad (cuda/loss.cu), the
same registrations as providers/cpu/loss.py.

Labels are checked on the device.  A label outside [0, C) that is not ignore_index is never
read through (its row counts as ignored) and is recorded in a flag on the device; a copy of
the flag goes to pinned host memory after each call, in stream order, and LabelGuard reads
it once that copy has landed, so no call waits for the GPU.  The error (ShapeError, the CPU
kernel's message) is raised when the host next waits for the provider's stream (fetching the
loss, run_node's results), by the next loss call on the provider, or by
`check_labels(provider)`, which waits.

The mean and sum over the rows (the losses and their weights, the mean's divisor) add up in
double in an order fixed by the number of rows alone, so a loss is the same on every device and
every run: one block over a few rows; over many (a per-pixel loss), blocks of chunks of rows
first, then one block over their sums (`row_chunks`).
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
              "sce_weight_sum": "PPqqqqiPP", "sce_grad": "PPPPPPqqqqiiP"}
KERNELS = {(name, suffix): Kernel("loss", f"{name}_{suffix}", sig)
           for name, sig in SIGNATURES.items() for suffix in LABEL_SUFFIX.values()}
REDUCE = Kernel("loss", "sce_reduce", "PqiP")
REDUCE_CHUNKS = Kernel("loss", "sce_reduce_chunks", "PqqP")
SUM = Kernel("loss", "sce_sum", "PqP")
REDUCTIONS = {"none": 0, "sum": 1, "mean": 2}
ONE_BLOCK = ((1, 1, 1), (MAX_BLOCK, 1, 1))
MIN_CHUNK_ROWS = 1024       # rows a block of the first level adds up, at the least
MAX_CHUNKS = MAX_BLOCK      # chunks of rows, at most: the second level's one block takes one each


def row_chunks(rows):
    """(rows per chunk, chunks) of the sums over `rows` rows: one chunk (one block) up to
    MIN_CHUNK_ROWS rows, else enough to fill the device's blocks and at most MAX_CHUNKS."""
    chunk = max(MIN_CHUNK_ROWS, -(-rows // MAX_CHUNKS))
    return chunk, -(-rows // chunk)


def reduce_rows(provider, dtype, partial, rows, mean, out):
    """out = the sum of the rows' losses, partial[0] of a (2, rows) float64 array, divided by
    the sum of their weights, partial[1], when `mean`."""
    chunk, chunks = row_chunks(rows)
    if chunks > 1:
        sums = provider.empty((2, chunks), np.float64)
        REDUCE_CHUNKS.launch(provider, dtype, (chunks, 1, 1), (BLOCK, 1, 1), partial, rows, chunk, sums)
        partial, rows = sums, chunks
    REDUCE.launch(provider, dtype, *ONE_BLOCK, partial, rows, int(mean), out)


def weight_sum(provider, dtype, labels, weights, rows, num_classes, ignore, has_ignore, flag):
    """A (1,) float64 device array: the sum of the class weights of the rows' labels (the
    mean's divisor; 0 weights: every class weighs 1), the labels checked into `flag`."""
    kernel = KERNELS["sce_weight_sum", LABEL_SUFFIX[np.dtype(labels.dtype)]]
    wsum = provider.empty((1,), np.float64)
    chunk, chunks = row_chunks(rows)
    if chunks > 1:
        sums = provider.empty((chunks,), np.float64)
        kernel.launch(provider, dtype, (chunks, 1, 1), (BLOCK, 1, 1), labels, weights, rows, chunk, num_classes,
                      ignore, has_ignore, flag, sums)
        SUM.launch(provider, dtype, *ONE_BLOCK, sums, chunks, wsum)
    else:
        kernel.launch(provider, dtype, *ONE_BLOCK, labels, weights, rows, chunk, num_classes, ignore, has_ignore,
                      flag, wsum)
    return wsum


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
        reduce_rows(prov, ctx.dtype, partial, rows, reduction == "mean", loss)
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
        wsum = weight_sum(prov, ctx.dtype, labels, weights, n * d, c, ignore, has_ignore, guard.flag)
    KERNELS["sce_grad", suffix].launch_elements(prov, ctx.dtype, dx.size, dy, log_prob, labels, weights, wsum, dx,
                                                n, c, d, ignore, has_ignore, reduction, guard.flag)
    if n * d:
        guard.launched(ctx.who, c, ctx.attrs.get("ignore_index"))
    return {"d_logits": dx}
