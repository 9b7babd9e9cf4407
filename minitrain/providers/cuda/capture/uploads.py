"""Small host-to-device copies that must not wait for the GPU: each goes through one slot of a
ring of pinned buffers; a slot is reused once the copy that last read it has completed."""
from __future__ import annotations

import numpy as np
import pycuda.driver as driver

SLOTS = 32
SLOT_BYTES = 256


class UploadRing:
    def __init__(self, provider):
        self.provider = provider
        self.host = driver.pagelocked_empty((SLOTS, SLOT_BYTES), np.uint8)
        self.events = [None] * SLOTS
        self.next = 0

    def upload(self, array):
        """A device copy of the small C-contiguous `array`, queued on the provider's stream.
        The copy is a persistent pool allocation, never a step arena's."""
        if array.nbytes > SLOT_BYTES:
            return self.provider.persistent_from_numpy(array)
        slot, self.next = self.next, (self.next + 1) % SLOTS
        if self.events[slot] is not None:
            self.events[slot].synchronize()
        else:
            self.events[slot] = driver.Event(driver.event_flags.DISABLE_TIMING)
        source = self.host[slot, :array.nbytes]
        source[...] = np.frombuffer(np.ascontiguousarray(array).tobytes(), np.uint8)
        value = self.provider.persistent_empty(array.shape, array.dtype)
        if array.nbytes:
            driver.memcpy_htod_async(value.gpudata, source, self.provider.stream)
        self.events[slot].record(self.provider.stream)
        return value
