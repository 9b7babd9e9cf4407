"""CudaProvider.fetch_async: device-to-host copies into a ring of pinned buffers, each set
guarded by an event; reading a PendingValues waits for its event only.  A ring slot is reused
after the values it held were moved into host arrays of their own."""
from __future__ import annotations

import numpy as np
import pycuda.driver as driver

from ...pending import PendingValues

SLOTS = 8


class FetchRing:
    def __init__(self, provider):
        self.provider = provider
        self.slots = [None] * SLOTS      # (pending, buffers) of each slot
        self.next = 0

    def fetch(self, values):
        slot, self.next = self.next, (self.next + 1) % SLOTS
        held = self.slots[slot]
        if held is not None:
            held[0].resolve()
        buffers = self._buffers(held[1] if held else {}, values)
        event = driver.Event(driver.event_flags.DISABLE_TIMING)
        for name, value in values.items():
            value = self.provider.contiguous(value)
            if value.size:
                driver.memcpy_dtoh_async(buffers[name], value.gpudata, self.provider.stream)
        event.record(self.provider.stream)

        def wait():
            event.synchronize()
            self.provider.run_sync_checks()
            return {name: np.array(buffers[name]) for name in values}
        pending = PendingValues(None, wait)
        self.slots[slot] = (pending, buffers)
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
