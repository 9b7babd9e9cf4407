"""A CPU step's memory as one arena: the CPU side of the static memory plan.

Freshly allocated NumPy buffers of a training step cost page faults: glibc serves large blocks
from fresh mmaps or trims its heap between steps, so the kernel maps and zeroes new pages every
step, in every thread that first touches them.  An arena that the step's allocations reuse
keeps its pages mapped, and a buffer that the plan reuses soon after its previous tensor died
is still in cache.  The figures: docs/measurements.md ("CPU step arena").

Per plan and input signature the runs follow step_replay.StepReplay, as CUDA's captured graphs
do: the first run is a plain warm-up (caches fill), the second (the recording) traces every
NumPy allocation of at least MIN_ARENA_BYTES (size, and when it is made and freed:
ext/step_arena.pyx), which memory_plan.pack places in one arena; later runs replay, served from
it, the i-th allocation at the i-th block's offset.  Blocks still live after the traced run
(the fetched values, anything a kernel caches) come from malloc in every run, so nothing the
caller keeps lives in the arena.  A block is handed out only when no block sharing its bytes is
live, so an allocation sequence that differs from the traced one is slower, never wrong; such a
run traces the step again, up to MAX_TRACES times, after which the signature runs without the
arena (one log line).

A second Python thread running the same plan while one runs it goes without the arena.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import numpy as np

from ..._ext.step_arena import StepArena
from ...memory_plan import check_disjoint, pack
from ...step_replay import Signature, StepReplay

log = logging.getLogger("minitrain.arena")
MAX_TRACES = 3
# Smaller allocations come from malloc's free lists, whose pages stay mapped: nothing to gain.
MIN_ARENA_BYTES = 4096


@dataclass
class ArenaPlan:
    """Where each traced allocation goes: offsets (-1: malloc), and per block the blocks that
    share bytes with it (CSR: conflict_ptr, conflict_idx)."""
    memory: object          # memory_plan.MemoryPlan of the blocks freed within the step
    sizes: np.ndarray
    offsets: np.ndarray
    conflict_ptr: np.ndarray
    conflict_idx: np.ndarray


def plan_arena(sizes, starts, ends):
    """The ArenaPlan of a trace (sizes, starts, ends; end -1: live after the step)."""
    sizes, starts, ends = (np.asarray(a, dtype=np.int64) for a in (sizes, starts, ends))
    inner = np.flatnonzero(ends >= 0)
    memory = pack([(sizes[i], starts[i], ends[i]) for i in inner])
    check_disjoint(memory)
    offsets = np.full(len(sizes), -1, dtype=np.int64)
    offsets[inner] = [b.offset for b in memory.blocks]
    begin = offsets[inner]
    end = begin + np.array([b.size for b in memory.blocks], dtype=np.int64)
    shares = (begin[:, None] < end[None, :]) & (begin[None, :] < end[:, None])
    np.fill_diagonal(shares, False)
    counts = np.zeros(len(sizes) + 1, dtype=np.int64)
    counts[inner + 1] = shares.sum(axis=1)
    _, cols = np.nonzero(shares)          # row-major: grouped by block, in index order
    return ArenaPlan(memory, sizes, offsets, np.cumsum(counts), inner[cols].astype(np.int64))


@dataclass
class _Signature(Signature):
    arena: StepArena = None
    plan: ArenaPlan = None


class StepArenas(StepReplay):
    """The arenas of one Executor's plan, per input signature; the CPU provider's step_graphs."""
    what = "step arena"
    logger = log
    signature_type = _Signature
    max_records = MAX_TRACES

    def __init__(self, executor):
        super().__init__(executor)
        self._running = threading.Lock()

    def run(self, fed, dims, dims_key):
        """Run the step on `fed` (validated host arrays); returns every value the plan fetches.
        A run while another thread runs the plan goes without the arena."""
        if not self._running.acquire(blocking=False):
            self.stats["concurrent"] += 1
            return self.run_plain(fed, dims, dims_key)
        try:
            return super().run(fed, dims, dims_key)
        finally:
            self._running.release()

    def replay(self, sig, fed, dims, dims_key):
        """Run with the traced allocations served from the arena."""
        arena = sig.arena
        arena.replay()
        values, made = self._execute_in(arena, self.executor.place_inputs(fed), dims, dims_key)
        return values, not arena.diverged and made == len(sig.plan.sizes)

    def _execute_in(self, arena, inputs, dims, dims_key):
        """Run the step with NumPy's allocations going through `arena`; (the fetched values,
        the count of recorded allocations the run made: arena.stop())."""
        previous = arena.activate()
        try:
            values = self.executor.execute(inputs, dims, dims_key)
        finally:
            arena.restore(previous)
            made = arena.stop()
        return values, made

    def record(self, sig, fed, dims, dims_key):
        """Run with every large allocation traced; plan the arena from the trace."""
        arena = StepArena(MIN_ARENA_BYTES)
        arena.trace()
        values, _ = self._execute_in(arena, self.executor.place_inputs(fed), dims, dims_key)
        self.stats["traces"] += 1
        plan = plan_arena(*arena.traced_blocks())
        arena.load(plan.sizes, plan.offsets, plan.conflict_ptr, plan.conflict_idx, plan.memory.arena_bytes)
        sig.arena, sig.plan = arena, plan
        log.info("step arena for plan %r at %s: %d bytes for %d allocations of %d bytes in all (%d outlive the step)",
                 self.executor.plan.graph.name, dict(dims) or "its fixed shapes", plan.memory.arena_bytes,
                 len(plan.memory.blocks), plan.memory.total_bytes, int(np.sum(plan.offsets < 0)))
        return values, True

    def memory(self):
        """(arena bytes, sum of the planned allocations' bytes) of each planned signature."""
        return {key: (sig.plan.memory.arena_bytes, sig.plan.memory.total_bytes)
                for key, sig in self.signatures.items() if sig.ready}
