"""DeviceState: a session's persistent tensors (parameters, optimizer moments, BatchNorm
running statistics, accumulated gradients) on its device, one copy shared by all its plans.

Each entry mirrors a host NumPy array that the model, optimizer or session owns.  On the CPU
the native tensor *is* that array, so nothing is ever copied; on a device the host arrays go
stale while training runs, and `pull()` refreshes them (for state_dict, checkpoints) while
`push()` sends them back after they were changed on the host (a checkpoint load).
"""
from __future__ import annotations

import numpy as np


class DeviceState:
    def __init__(self, provider):
        self.provider = provider
        self._host = {}
        self._native = {}

    def native(self, name, array=None):
        """The device tensor of `name`, made from the host `array` on first use."""
        value = self._native.get(name)
        if value is None:
            if array is None:
                raise KeyError(f"no state tensor {name!r}")
            self._host[name] = array
            value = self._native[name] = self.provider.from_numpy(array)
        return value

    def host(self, name):
        """The host array that `name` mirrors (current after pull())."""
        return self._host[name]

    def __contains__(self, name):
        return name in self._native

    def pull(self, names=None):
        """Copy the device tensors (all, or `names`) into their host arrays."""
        for name in self._native if names is None else names:
            native, host = self._native[name], self._host[name]
            if native is not host:
                np.copyto(host, self.provider.to_numpy(native))

    def push(self, names=None):
        """Copy the host arrays (all, or `names`) into their device tensors."""
        for name in self._native if names is None else names:
            native, host = self._native[name], self._host[name]
            if native is not host:
                self.provider.copy_into(native, host)
