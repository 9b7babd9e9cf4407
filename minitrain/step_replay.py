"""Replaying a step: the per-signature state machine of the CPU's step arena
(providers/cpu/step_arena.py) and CUDA's step graphs (providers/cuda/capture/step_graph.py).

For one plan and one input signature (what its symbolic dims stand for) a step is
deterministic: it makes the same allocations in the same order on every run.  Per signature, a
StepReplay runs the step

  warm-up  once, plainly: kernels compile, convolution searches run, caches fill;
  record   through `record` until it says the signature is ready (the CPU traces the
           allocations and packs an arena in one run; CUDA records them, then captures);
  replay   through `replay` from then on.

A replay that finds the step no longer doing what was recorded sends its signature back to
record; after `max_records` recordings the signature is turned off and runs plainly.  A failure
of a type in `failures` while recording turns replay off for the whole plan (`disabled`: its
runs are plain from then on, that one included).  Either way one log line says why.  The
signatures live in an LRU cache of `max_signatures` entries.
"""
from __future__ import annotations

import abc
import collections
import logging
from dataclasses import dataclass

from .caches import lru_entry


@dataclass
class Signature:
    """The replay state of one input signature (subclasses add what they record)."""
    runs: int = 0           # runs before it was ready: the warm-up and the recording ones
    records: int = 0        # recordings completed
    ready: bool = False     # recorded: its runs replay
    off: bool = False       # turned off: its runs are plain


class StepReplay(abc.ABC):
    """Runs one Executor's step per input signature: warm-up, record, replay.

    A subclass names itself for the log (`what`, `logger`), may change the limits and the
    failures it survives, and implements `record` and `replay`.
    """
    what = "step replay"
    logger = logging.getLogger("minitrain.replay")
    signature_type = Signature
    max_signatures = 4
    max_records = 1
    failures = ()

    def __init__(self, executor):
        self.executor = executor
        self.signatures = collections.OrderedDict()
        self.stats = collections.Counter()
        self.disabled = None        # why replay is off for the whole plan, or None

    @abc.abstractmethod
    def record(self, sig, fed, dims, dims_key):
        """Run the step on `fed` recording what replaying needs; (the fetched values, whether
        the signature is ready to replay)."""

    @abc.abstractmethod
    def replay(self, sig, fed, dims, dims_key):
        """Replay the recorded step on `fed`; (the fetched values, whether the run did what was
        recorded: False sends the signature back to record)."""

    def run(self, fed, dims, dims_key):
        """Run the step on `fed` (input name -> validated host array or native tensor); returns
        every value the plan fetches."""
        if self.disabled:
            self.stats["plain"] += 1
            return self.run_plain(fed, dims, dims_key)
        sig = lru_entry(self.signatures, dims_key, self.signature_type, self.max_signatures)
        if sig.ready:
            values, as_recorded = self.replay(sig, fed, dims, dims_key)
            self.stats["replays"] += 1
            if not as_recorded:
                self.stats["diverged"] += 1
                sig.ready = False
                if sig.records >= self.max_records:
                    self.turn_off("its allocations differ from run to run", sig, dims)
            return values
        if sig.off:
            self.stats["plain"] += 1
            return self.run_plain(fed, dims, dims_key)
        sig.runs += 1
        if sig.runs == 1:
            self.stats["warmups"] += 1
            return self.run_plain(fed, dims, dims_key)
        try:
            values, ready = self.record(sig, fed, dims, dims_key)
        except self.failures as error:
            self.turn_off(f"{type(error).__name__}: {error}")
            return self.run_plain(fed, dims, dims_key)
        if ready:
            sig.ready = True
            sig.records += 1
        return values

    def run_plain(self, fed, dims, dims_key):
        """The step run node by node, nothing recorded or replayed."""
        return self.executor.execute(self.executor.place_inputs(fed), dims, dims_key)

    def turn_off(self, why, sig=None, dims=None):
        """Turn replay off for the signature `sig`, or for the whole plan; one log line says why."""
        plan = self.executor.plan.graph.name
        if sig is not None:
            sig.off = True
            self.logger.info("%s off for plan %r at %s: %s", self.what, plan, dict(dims) or "its fixed shapes", why)
        else:
            self.disabled = why
            self.signatures.clear()
            self.logger.info("%s off for plan %r: %s", self.what, plan, why)
