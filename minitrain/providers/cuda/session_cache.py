"""What the CUDA kernels keep per provider, hence per session, between calls: scratch buffers,
device tables, library handles, guards.  Each provider owns one SessionCache (`provider.cache`),
which kernels reach through ctx.provider; it goes with the provider."""
import threading


class SessionCache:
    def __init__(self):
        self._entries = {}
        self._lock = threading.RLock()

    def get(self, key, make):
        """The entry under `key`, made by `make()` on first use."""
        entry = self._entries.get(key)
        if entry is None:
            with self._lock:
                entry = self._entries.get(key)
                if entry is None:
                    entry = self._entries[key] = make()
        return entry

    def find(self, key):
        """The entry under `key`, or None when nothing made it yet."""
        return self._entries.get(key)
