"""Per-node times of an Executor's runs, and a Chrome trace of them.

Each node is bracketed by two time markers of its provider (host wall clock on the CPU, CUDA
events on the GPU, so no node waits for the device); the markers are read once the run has
been queued.  A device's queue is held (`Provider.hold`) before its first node, long enough for
the host to queue the whole step, so its nodes then run back to back and their times are the
device's alone, without the host's launch gaps.  `chrome_trace()` lays the last run out as the Trace Event Format that
chrome://tracing and Perfetto (ui.perfetto.dev) open: one row per provider, one slice per node.
"""
from __future__ import annotations

import json
import os
import tempfile


HOLD_SECONDS = 0.05


class NodeProfiler:
    def __init__(self):
        self.totals = {}        # node name -> seconds over all profiled runs
        self.last_run = []      # (node name, op type, provider name, start s, duration s) of the last run
        self._pending = []
        self._held = set()      # ids of the providers held in the run being queued

    def run(self, step, provider, args, shapes):
        """Run one step between two markers of its provider."""
        if id(provider) not in self._held:
            self._held.add(id(provider))
            provider.hold(HOLD_SECONDS)
        start = provider.time_marker()
        results = step.bound.run(provider, args, shapes)
        self._pending.append((step.node, provider, start, provider.time_marker()))
        return results

    def end_run(self):
        """Read the markers of the run just queued (waits for the devices once)."""
        self._held = set()
        if not self._pending:
            return
        origin = {}
        self.last_run = []
        for node, provider, start, end in self._pending:
            first = origin.setdefault(provider.name, (provider, start))[1]
            offset = provider.seconds_between(first, start)
            duration = provider.seconds_between(start, end)
            self.totals[node.name] = self.totals.get(node.name, 0.0) + duration
            self.last_run.append((node.name, node.op_type, provider.name, offset, duration))
        self._pending = []

    def chrome_trace(self):
        """The last run as a Trace Event Format dict (times in microseconds)."""
        rows = {name: k for k, name in enumerate(sorted({r[2] for r in self.last_run}))}
        events = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": provider}}
                  for provider, pid in rows.items()]
        events += [{"name": name, "cat": op_type, "ph": "X", "pid": rows[provider], "tid": 0,
                    "ts": round(start * 1e6, 3), "dur": round(duration * 1e6, 3), "args": {"op_type": op_type}}
                   for name, op_type, provider, start, duration in self.last_run]
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def write_chrome_trace(self, path):
        """Write chrome_trace() to `path` as JSON (atomically)."""
        folder = os.path.dirname(os.path.abspath(path))
        handle, temporary = tempfile.mkstemp(dir=folder, suffix=".tmp")
        try:
            with os.fdopen(handle, "w") as f:
                json.dump(self.chrome_trace(), f)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
