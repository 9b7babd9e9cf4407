"""Values fetched to the host without waiting: `Provider.fetch_async` queues the copies and
returns a PendingValues, which waits only when a value is read."""
from __future__ import annotations


class PendingValues:
    """name -> host array, available once `ready()` (a wait) has returned."""

    def __init__(self, arrays, wait=None):
        self._arrays, self._wait = arrays, wait

    def resolve(self):
        """Wait for the copies (once) and keep host arrays of their own."""
        if self._wait is not None:
            wait, self._wait = self._wait, None
            self._arrays = wait()
        return self._arrays

    def __getitem__(self, name):
        return self.resolve()[name]


class PendingScalar:
    """One fetched scalar (`values[name]`); float() waits for it."""

    def __init__(self, values, name):
        self.values, self.name = values, name

    def __float__(self):
        return float(self.values[self.name])

    def __repr__(self):
        return f"PendingScalar({float(self)!r})"
