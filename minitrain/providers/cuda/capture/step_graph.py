"""Whole-step CUDA Graphs for an Executor: a step with a static input signature is captured once
and replayed.

Per plan and input signature (the batch size, say) the runs follow step_replay.StepReplay, as
the CPU's step arena does: the first run is a plain warm-up (kernels compile, convolution
searches run, caches fill); recording takes two runs, the first recording every allocation the
step makes and packing them into one arena (memory_plan.pack), the second capturing the step,
its allocations served from that arena, into a graph; every later run replays: it copies the
inputs into the graph's input tensors and launches the graph.  The step then allocates nothing
and does not wait for the GPU.

Inputs travel through pinned host buffers, double-buffered: run k writes its batch into pinned
buffer k % 2, copies it on a side stream into device staging k % 2 (overlapping step k - 1 on
the GPU), and the main stream copies staging into the graph's input tensors just before the
launch; inputs fed as device tensors are copied into them directly.  Host values a kernel needs
afresh every execution (a Dropout seed: `uploaded`) ride along the same way.  A small host value
equal to the one the previous run loaded (a constant learning rate) is not copied again.

A plan is not captured when a node runs on another provider or reads a per-run input from host
memory, but for the shape arithmetic of run-time shape subgraphs (shape_folding.py): host nodes
of the ops that fold (constant_folding.FOLDED_OPS: deterministic, no side effect) computing
integers from the dims that Shape and Size read and from integer initializers, whose values the
input signature fixes, so a replay needs them no more than the launch parameters they gave the
kernels after them.  A capture that fails (an allocation sequence that differs from the recorded
one, an operation the driver cannot capture) turns capture off for the plan.  Either way one log
line says why and the plan runs uncaptured, with the same results.
"""
from __future__ import annotations

import contextlib
import gc
import logging
from dataclasses import dataclass, field

import numpy as np
import pycuda.driver as driver

from ....constant_folding import FOLDED_OPS
from ....step_replay import Signature, StepReplay
from .arena import AllocationTrace, ArenaAllocator
from ..libs.graphs import StreamCapture

log = logging.getLogger("minitrain.capture")


@dataclass
class StepCaptureRecord:
    """What a capture collects from the kernels (see CudaProvider.per_execution, uploaded)."""
    after_launch: list = field(default_factory=list)
    uploads: list = field(default_factory=list)        # (device tensor, make)
    keep: list = field(default_factory=list)           # device tensors the graph reads


@dataclass
class _Signature(Signature):
    inputs: dict = None          # graph input name -> device tensor the graph reads
    trace: AllocationTrace = None
    arena: ArenaAllocator = None
    graph: object = None
    record: StepCaptureRecord = None
    outputs: dict = None
    staging: object = None
    memory_plan: object = None


DIMS_QUERIES = {("Shape", ""), ("Size", "")}     # their host outputs read a tensor's dims, never its data


def _integer(plan, name):
    t = plan.types.get(name)
    return t is not None and np.dtype(t.dtype).kind in "iu"


def capture_blocker(plan, provider):
    """Why `plan` cannot be captured on `provider`, or None."""
    fixed = {name for name in plan.graph.initializers if plan.locations[name] != provider.name and _integer(plan, name)}
    others = set()
    for step in plan.steps:
        node, outputs = step.node, [o for o in step.node.outputs if o]
        if step.provider == provider.name:
            if (node.op_type, node.domain) in DIMS_QUERIES:
                fixed.update(outputs)
            if node.op_type == "MemcpyFromHost":
                return f"node {node.name!r} copies {node.inputs[0]!r} from host memory at every step"
        elif (node.op_type in FOLDED_OPS and not node.domain and all(not x or x in fixed for x in node.inputs)
              and all(_integer(plan, o) for o in outputs)):
            fixed.update(outputs)       # shape arithmetic: the same at every run of a signature
        else:
            others.add(step.provider)
    if others:
        return f"nodes run on {', '.join(sorted(others))}"
    host = [v.name for v in plan.graph.inputs
            if v.name in plan.needed_inputs and plan.locations[v.name] != provider.name]
    if host:
        return f"input(s) {host} are read from host memory"
    return None


class StepGraphs(StepReplay):
    """The captured graphs of one Executor's plan, per input signature (a bounded cache)."""
    what = "CUDA Graph capture"
    logger = log
    signature_type = _Signature
    failures = (Exception,)     # any failure while recording or capturing: run uncaptured, and say why

    def __init__(self, executor, provider):
        super().__init__(executor)
        self.provider = provider
        blocker = capture_blocker(executor.plan, provider)
        if blocker:
            self.turn_off(blocker)

    def record(self, sig, fed, dims, dims_key):
        """Record the step's allocations, then, on the next run, capture it."""
        if sig.trace is None:
            return self._record(sig, fed, dims, dims_key), False
        return self._capture(sig, fed, dims, dims_key), True

    def replay(self, sig, fed, dims, dims_key):
        """Launch the captured graph on `fed`."""
        return self._launch(sig, fed), True

    def _record(self, sig, fed, dims, dims_key):
        """Run once with every allocation recorded, the inputs in their own tensors."""
        self.stats["records"] += 1
        sig.inputs = {name: self.provider.persistent_empty(np.shape(value), value.dtype)
                      for name, value in fed.items()}
        for name, value in fed.items():
            self.provider.copy_into(sig.inputs[name], value)
        sig.trace = AllocationTrace(self.provider.pool.allocate)
        with self.provider.allocating(sig.trace):
            values = self.executor.execute(dict(sig.inputs), dims, dims_key)
        sig.trace.finish()
        return values

    def _capture(self, sig, fed, dims, dims_key):
        """Capture the step into a graph (nothing runs yet), then launch it on `fed`."""
        plan = sig.trace.plan()
        sig.arena = ArenaAllocator(self.provider, plan, sig.trace.sizes)
        sig.record = StepCaptureRecord()
        self.provider.synchronize()
        self.provider.capture = sig.record
        try:
            with without_collector(), self.provider.allocating(sig.arena), \
                    StreamCapture(self.provider.stream) as capture:
                outputs = self.executor.execute(dict(sig.inputs), dims, dims_key)
        finally:
            self.provider.capture = None
        sig.arena.finish()
        sig.graph, sig.outputs, sig.trace = capture.graph, outputs, None
        sig.staging = _Staging(self.provider, sig.inputs, sig.record.uploads)
        self.stats["captures"] += 1
        log.info("captured plan %r for %s: %d graph nodes, arena %d bytes for %d allocations of %d bytes in all",
                 self.executor.plan.graph.name, dict(dims) or "its fixed shapes", sig.graph.node_count,
                 plan.arena_bytes, len(plan.blocks), plan.total_bytes)
        sig.memory_plan = plan
        return self._launch(sig, fed)

    def _launch(self, sig, fed):
        sig.staging.load(fed)
        sig.graph.launch(self.provider.stream)
        for hook in sig.record.after_launch:
            hook()
        return dict(sig.outputs)

    def memory(self):
        """(arena bytes, sum of the allocations' bytes) of each captured signature."""
        return {key: (sig.memory_plan.arena_bytes, sig.memory_plan.total_bytes)
                for key, sig in self.signatures.items() if sig.ready}


class _Staging:
    """Double-buffered pinned and device staging of a graph's inputs and per-execution uploads.

    Host values of at most SMALL_BYTES (a learning rate, a seed) that equal what the previous
    run loaded are not copied again: the graph's input tensors still hold them, as nothing but
    `load` writes them.  A run whose host values are all such skips the staging altogether."""
    SMALL_BYTES = 256

    def __init__(self, provider, inputs, uploads):
        self.provider = provider
        self.targets = [(name, tensor) for name, tensor in inputs.items()] + \
                       [(make, tensor) for tensor, make in uploads]
        self.offsets, total = [], 0
        for _, tensor in self.targets:
            self.offsets.append(total)
            total += -(-tensor.nbytes // 256) * 256
        self.total = max(total, 1)
        self.host = [driver.pagelocked_empty(self.total, np.uint8) for _ in range(2)]
        self.device = [provider.persistent_empty((self.total,), np.uint8) for _ in range(2)]
        self.copied = [driver.Event(driver.event_flags.DISABLE_TIMING) for _ in range(2)]
        self.consumed = [driver.Event(driver.event_flags.DISABLE_TIMING) for _ in range(2)]
        self.copy_stream = driver.Stream()
        self.parity = 0
        self.used = [False, False]
        self.loaded = {}        # target index -> bytes of the small host value its tensor holds

    def load(self, fed):
        """Queue this run's inputs into the graph's input tensors (main stream order)."""
        from_host, on_device = [], []
        for index, (source, tensor) in enumerate(self.targets):
            value = fed[source] if isinstance(source, str) else source()
            if self.provider.is_native(value):
                on_device.append((tensor, value))
            else:
                from_host.append((index, np.ascontiguousarray(value, tensor.dtype).reshape(-1).view(np.uint8)))
        if from_host and not self._hold(from_host):
            self._stage(from_host)
        for tensor, value in on_device:
            self.provider.copy_into(tensor, value)

    def _hold(self, from_host):
        """Whether every host value is small and already in its tensor."""
        return all(flat.size <= self.SMALL_BYTES and self.loaded.get(index) == flat.tobytes()
                   for index, flat in from_host)

    def _stage(self, from_host):
        """Copy the host values through pinned buffer and device staging of this run's parity."""
        p, self.parity = self.parity, self.parity ^ 1
        if self.used[p]:
            self.copied[p].synchronize()          # the copy from host[p] two runs ago is done
            self.copy_stream.wait_for_event(self.consumed[p])
        self.used[p] = True
        host, device, stream = self.host[p], self.device[p], self.provider.stream
        for index, flat in from_host:
            offset = self.offsets[index]
            host[offset:offset + flat.size] = flat
            self.loaded[index] = flat.tobytes() if flat.size <= self.SMALL_BYTES else None
        base = int(device.gpudata)
        first = self.offsets[from_host[0][0]]      # one copy over the span of the host-fed values
        last = self.offsets[from_host[-1][0]] + from_host[-1][1].size
        driver.memcpy_htod_async(base + first, host[first:last], self.copy_stream)
        self.copied[p].record(self.copy_stream)
        stream.wait_for_event(self.copied[p])
        for index, flat in from_host:
            if flat.size:
                driver.memcpy_dtod_async(self.targets[index][1].gpudata, base + self.offsets[index], flat.size, stream)
        self.consumed[p].record(stream)


@contextlib.contextmanager
def without_collector():
    """Python's cyclic garbage collector run before a capture and held off during it: a
    collection inside it could free another session's device memory (cuMemFree), which
    invalidates the capture."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
