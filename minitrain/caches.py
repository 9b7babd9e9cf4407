"""Bounded caches of what minitrain works out per shape: convolution geometry and plans, pooling
tables, validated nodes, a plan step's output shapes.

A program that feeds ever new shapes (a variable batch, a sweep over image sizes) would grow an
unbounded cache without end, so each of these keeps its least recently used entries only:
`cache_limit()` entries (`set_cache_limit(n)`, or the environment variable
MINITRAIN_CACHE_LIMIT read at import; default DEFAULT_LIMIT), times the cache's `scale`
(validated nodes, one entry per node of a graph, keep more).  Inserts hold a lock and lookups
make single atomic dict calls, so kernels may run from several Python threads; a value is built
outside the lock (two threads may build the same entry; both results are equal and one is kept).
"""
import functools
import threading
import weakref
from collections import OrderedDict

import numpy as np

from .env import count_from_env, require_count

DEFAULT_LIMIT = 1024

_CACHES = weakref.WeakSet()
_CACHES_LOCK = threading.Lock()       # plan steps make caches while another thread may trim


_limit = count_from_env("MINITRAIN_CACHE_LIMIT", DEFAULT_LIMIT)


def cache_limit():
    """Entries each shape-keyed cache keeps (times its scale)."""
    return _limit


def set_cache_limit(n):
    """Keep at most n entries (times their scale) in each of minitrain's shape-keyed caches;
    caches over the new limit drop their least recently used entries now."""
    global _limit
    _limit = require_count("set_cache_limit", n)
    for cache in _all_caches():
        cache.trim()


def clear_caches():
    """Empty every shape-keyed cache (their entries are rebuilt on next use)."""
    for cache in _all_caches():
        cache.clear()


def _all_caches():
    with _CACHES_LOCK:
        return list(_CACHES)


class LRUCache:
    """A thread-safe mapping that keeps its cache_limit() * scale most recently used entries."""

    def __init__(self, name, scale=1):
        self.name, self.scale = name, scale
        self._entries = OrderedDict()
        self._lock = threading.Lock()
        with _CACHES_LOCK:
            _CACHES.add(self)

    def __len__(self):
        return len(self._entries)

    @property
    def limit(self):
        return _limit * self.scale

    def get(self, key):
        """The entry of key (now the most recently used), or None.  Each of the two dict calls
        is atomic: an entry another thread evicts between them reads as absent, and is rebuilt."""
        entries = self._entries
        try:
            entries.move_to_end(key)
            return entries[key]
        except KeyError:
            return None

    def put(self, key, value):
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            self._trim_locked()

    def get_or_build(self, key, build):
        """The entry of key, built by build() and kept when absent; errors propagate, uncached."""
        value = self.get(key)
        if value is None:
            value = build()
            self.put(key, value)
        return value

    def trim(self):
        with self._lock:
            self._trim_locked()

    def clear(self):
        with self._lock:
            self._entries.clear()

    def _trim_locked(self):
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)


def lru_entry(table, key, make, limit):
    """table[key] of an OrderedDict kept to `limit` entries: made by make() when missing (the
    least recently used entry then goes past the limit), and marked most recently used."""
    entry = table.get(key)
    if entry is None:
        entry = table[key] = make()
        if len(table) > limit:
            table.popitem(last=False)
    else:
        table.move_to_end(key)
    return entry


def bounded_cache(name, scale=1):
    """Decorator: memoise a function of hashable arguments in an LRUCache (`fn.cache`)."""
    def wrap(fn):
        cache = LRUCache(name, scale)

        @functools.wraps(fn)
        def cached(*args, **kwargs):
            key = (args, tuple(sorted(kwargs.items()))) if kwargs else args
            value = cache.get(key)
            if value is None:
                value = fn(*args, **kwargs)
                cache.put(key, value)
            return value
        cached.cache = cache
        return cached
    return wrap


def freeze(value):
    """A hashable form of an attribute value or attribute dict (lists become tuples, arrays
    their dtype, shape and bytes, dicts their sorted items); raises TypeError when some part
    cannot be hashed.  Kernels key their plans by it on every call: attributes of plain values
    and flat lists take one pass."""
    if isinstance(value, dict):
        flat = tuple(sorted((k, tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in value.items()))
    else:
        flat = tuple(value) if isinstance(value, (list, tuple)) else value
    try:
        hash(flat)
        return flat
    except TypeError:
        return _deep_freeze(value)


def _deep_freeze(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _deep_freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_deep_freeze(v) for v in value)
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    hash(value)
    return value
