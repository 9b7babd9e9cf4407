"""Whole-step CUDA Graphs for an Executor: a step with a static input signature is captured once
and replayed.

Per plan and input signature (the batch size, say) the runs follow step_replay.StepReplay, as
the CPU's step arena does: the first run is a plain warm-up (kernels compile, convolution
searches run, caches fill); recording takes two runs, the first recording every allocation the
step makes and packing them into one arena (memory_plan.pack), the second capturing the step,
its allocations served from that arena, into a graph; every later run replays: it launches
the graph on the run's inputs.  The step then allocates nothing and does not wait for the GPU.

The graph copies its inputs into its input tensors itself, by copies at its head whose sources
each launch sets: an input fed as a device tensor is read where it lies; host inputs travel
through pinned host buffers, double-buffered: run k writes its batch into pinned buffer k % 2,
copies it on a side stream into device staging k % 2 (overlapping step k - 1 on the GPU), and
the graph's copies read it from there.  Host values a kernel needs afresh every execution (a
Dropout seed: `uploaded`) ride along the same way.  A small host value equal to the one staged
last (a constant learning rate) is not copied again.

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
        sig.staging = _Staging(self.provider, sig.inputs, sig.record.uploads, capture.graph)
        sig.graph, sig.outputs, sig.trace = capture.graph, outputs, None
        self.stats["captures"] += 1
        log.info("captured plan %r for %s: %d graph nodes, arena %d bytes for %d allocations of %d bytes in all",
                 self.executor.plan.graph.name, dict(dims) or "its fixed shapes", sig.graph.node_count,
                 plan.arena_bytes, len(plan.blocks), plan.total_bytes)
        sig.memory_plan = plan
        return self._launch(sig, fed)

    def _launch(self, sig, fed):
        sig.staging.launch(fed, self.provider.stream)
        for hook in sig.record.after_launch:
            hook()
        return dict(sig.outputs)

    def memory(self):
        """(arena bytes, sum of the allocations' bytes) of each captured signature."""
        return {key: (sig.memory_plan.arena_bytes, sig.memory_plan.total_bytes)
                for key, sig in self.signatures.items() if sig.ready}


class _Staging:
    """How a captured graph's inputs and per-execution uploads get their values: the graph is
    instantiated here with a head copy into each of those tensors (CapturedGraph.instantiate),
    and every launch points the copies' sources at the fed device tensors, or at the device
    staging that the run's host values were copied into (pinned and device staging,
    double-buffered, copied on a side stream while the GPU still runs the previous step).

    A host value of at most SMALL_BYTES (a learning rate, a seed) equal to the one staged last
    for its tensor, whose copy still reads it from there, is not staged again.  A run whose host
    values are all such, and whose device tensors are those of the last run, only launches."""
    SMALL_BYTES = 256

    def __init__(self, provider, inputs, uploads, graph):
        self.provider = provider
        self.graph = graph
        targets = [(name, tensor) for name, tensor in inputs.items()] + [(make, tensor) for tensor, make in uploads]
        self.targets = [(source, tensor) for source, tensor in targets if tensor.nbytes]
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
        self.read_parity = None  # the parity of the device staging that copies read, once one does
        self.loaded = {}        # target index -> bytes of the small host value its copy reads
        base = int(self.device[0].gpudata)
        self.sources = [base + offset for offset in self.offsets]
        self.device_inputs = [None] * len(self.targets)    # the device tensors the copies read, kept alive
        graph.instantiate([(int(tensor.gpudata), source, tensor.nbytes)
                           for (_, tensor), source in zip(self.targets, self.sources)])

    def launch(self, fed, stream):
        """Point the graph's copies at this run's inputs and launch it on `stream`."""
        from_host = []
        for index, (source, tensor) in enumerate(self.targets):
            value = fed[source] if isinstance(source, str) else source()
            if value is self.device_inputs[index]:
                continue                    # the device tensor its copy reads already
            if self.provider.is_native(value):
                value = self.provider.contiguous(value)
                self._point(index, int(value.gpudata))
                self.device_inputs[index] = value
                self.loaded.pop(index, None)
            else:
                from_host.append((index, np.ascontiguousarray(value, tensor.dtype).reshape(-1).view(np.uint8)))
        if from_host and not self._hold(from_host):
            self._stage(from_host, stream)
        self.graph.launch(stream)
        if self.read_parity is not None:
            self.consumed[self.read_parity].record(stream)

    def _point(self, index, pointer):
        if self.sources[index] != pointer:
            self.graph.set_copy_source(index, pointer)
            self.sources[index] = pointer

    def _hold(self, from_host):
        """Whether every host value is small and what its copy reads already."""
        return all(flat.size <= self.SMALL_BYTES and self.loaded.get(index) == flat.tobytes()
                   for index, flat in from_host)

    def _stage(self, from_host, stream):
        """Copy the host values through pinned buffer and device staging of this run's parity,
        and point their copies there."""
        p, self.parity = self.parity, self.parity ^ 1
        if self.used[p]:
            self.copied[p].synchronize()          # the copy from host[p] two stagings ago is done
            self.copy_stream.wait_for_event(self.consumed[p])
        self.used[p] = True
        host, base = self.host[p], int(self.device[p].gpudata)
        for index, flat in from_host:
            offset = self.offsets[index]
            host[offset:offset + flat.size] = flat
            self.loaded[index] = flat.tobytes() if flat.size <= self.SMALL_BYTES else None
            self.device_inputs[index] = None
            self._point(index, base + offset)
        first = self.offsets[from_host[0][0]]      # one copy over the span of the host-fed values
        last = self.offsets[from_host[-1][0]] + from_host[-1][1].size
        driver.memcpy_htod_async(base + first, host[first:last], self.copy_stream)
        self.copied[p].record(self.copy_stream)
        stream.wait_for_event(self.copied[p])
        self.read_parity = p


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
