"""A second CUDA stream beside a provider's stream, for the collectives that should overlap the
compute queued after them (PyTorch DDP's communication stream).

`start(enqueue, result, holding)`: an event recorded on the compute stream after everything
queued so far, the collective stream waiting for it, `enqueue(stream)` queueing the collective
there, and an event marking its end.  `wait(result)` makes the compute stream wait for that end
event.  Until then the tensors the collective reads and writes (`holding`, `result`) are held
here, so that no allocation on the compute stream reuses their memory while the collective may
still use it; after the wait, stream order covers them again.

Inside a CUDA Graph capture the same calls build the graph's parallel branch: the collective
stream joins the capture by waiting on an event of the capturing stream, and joins back at the
wait, which must come before the capture ends (every StartAllReduce of a plan has its
WaitAllReduce).
"""
from __future__ import annotations

from dataclasses import dataclass

import pycuda.driver as driver


@dataclass
class _Pending:
    result: object
    done: object
    holding: tuple


class CollectiveStream:
    """The collective stream of the compute stream `compute` (see the module docstring)."""

    def __init__(self, compute):
        self.compute = compute
        self.stream = driver.Stream()
        self._ready = _event()
        self._pending = []
        self._spare_events = []

    def start(self, enqueue, result, holding=()):
        """Queue `enqueue(stream)` on the collective stream after the work queued so far on the
        compute stream; `result` is what a later wait(result) waits for."""
        self._ready.record(self.compute)
        self.stream.wait_for_event(self._ready)
        done = self._spare_events.pop() if self._spare_events else _event()
        try:
            enqueue(self.stream)
        finally:
            done.record(self.stream)
        self._pending.append(_Pending(result, done, tuple(holding)))

    def wait(self, result):
        """Make the compute stream wait for the collective that writes `result`; nothing to do
        when none is pending for it (it was queued on the compute stream)."""
        for index, pending in enumerate(self._pending):
            if pending.result is result:
                del self._pending[index]
                self.compute.wait_for_event(pending.done)
                self._spare_events.append(pending.done)
                return

    @property
    def pending(self):
        """How many started collectives have not been waited for."""
        return len(self._pending)


def _event():
    return driver.Event(driver.event_flags.DISABLE_TIMING)


def collective_stream(provider):
    """The provider's CollectiveStream (made on first use)."""
    return provider.cache.get("collective stream", lambda: CollectiveStream(provider.stream))
