"""CudaProvider.fetch_async: device-to-host copies into a ring of pinned buffers, each set
guarded by an event; reading a PendingValues waits for its event only.  A ring slot is reused
after the values it held were moved into host arrays of their own.  Values already in host
memory (from nodes that ran on the CPU) need no copy on the stream."""
from __future__ import annotations

import numpy as np
import pycuda.driver as driver

from ...pending import PendingValues

SLOTS = 8


class FetchRing:
    def __init__(self, provider):
        self.provider = provider
        self.slots = [None] * SLOTS      # (pending, buffers, event) of each slot
        self.next = 0

    def fetch(self, values):
        """PendingValues of `values`: device arrays copied into the slot's pinned buffers on the
        stream; host arrays (values a CPU node computed) copied at once."""
        slot, self.next = self.next, (self.next + 1) % SLOTS
        held = self.slots[slot]
        if held is not None:
            held[0].resolve()
        on_host = {name: np.array(v) for name, v in values.items() if isinstance(v, np.ndarray)}
        on_device = {name: v for name, v in values.items() if name not in on_host}
        buffers = self._buffers(held[1] if held else {}, on_device)
        event = held[2] if held else driver.Event(driver.event_flags.DISABLE_TIMING)
        for name, value in on_device.items():
            value = self.provider.contiguous(value)
            if value.size:
                driver.memcpy_dtoh_async(buffers[name], value.gpudata, self.provider.stream)
        event.record(self.provider.stream)

        def wait():
            event.synchronize()
            self.provider.run_sync_checks()
            copied = {name: np.array(buffers[name]) for name in on_device}
            return {name: copied[name] if name in copied else on_host[name] for name in values}
        pending = PendingValues(None, wait)
        self.slots[slot] = (pending, buffers, event)
        return pending

    @staticmethod
    def _buffers(previous, values):
        """Pinned host arrays for `values`, reusing the slot's previous ones where they fit."""
        buffers = {}
        for name, value in values.items():
            old = previous.get(name)
            if old is not None and old.shape == value.shape and old.dtype == value.dtype:
                buffers[name] = old
            else:
                buffers[name] = driver.pagelocked_empty(value.shape, value.dtype)
        return buffers
