"""When the CPU kernels write their output with non-temporal (streaming) stores (ext/stream.h).

The rule: stream when the bytes a kernel touches (its inputs read once plus its output) exceed
the last-level cache.  Then the cache cannot hold the working set, the output is evicted before
anyone reads it again, and an ordinary store wastes a read-for-ownership of every output line;
a streaming store skips it.  Below that, the output (and the inputs) stay in cache between
kernels, and streaming would push the output to memory only for the next kernel to read it
back.  Where a guest reports a last-level cache larger than the real one, nothing streams: the
reported size is what the rule trusts.

Only memory-bound kernels stream, the callers decide which: the gradients of Relu, LeakyRelu,
Sigmoid, Tanh, Softmax and LogSoftmax (whose last pass reuses the exps of its first).
QuickGeluGrad, an exp per element, and the forward activations do not: their arithmetic, not
the bus, sets their pace.  The measurements behind the rule: docs/measurements.md ("Streaming
stores").

The cache size comes from Linux's sysfs (the largest cache level of cpu0), then from
sysconf, else DEFAULT_LLC_BYTES.  glibc's sysconf(_SC_LEVEL3_CACHE_SIZE) is only the fallback:
in some VMs it reports ten times the real L3.
"""
import os

DEFAULT_LLC_BYTES = 32 << 20
_SYSFS_CACHE = "/sys/devices/system/cpu/cpu0/cache"


def _parse_size(text):
    """sysfs sizes read like '32768K' or '1M'."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def last_level_cache_bytes():
    """Size of the last-level cache in bytes (DEFAULT_LLC_BYTES when nothing reports it)."""
    try:
        levels = {}
        for entry in os.listdir(_SYSFS_CACHE):
            if entry.startswith("index"):
                with open(os.path.join(_SYSFS_CACHE, entry, "level")) as f:
                    level = int(f.read())
                with open(os.path.join(_SYSFS_CACHE, entry, "size")) as f:
                    levels[level] = max(levels.get(level, 0), _parse_size(f.read()))
        if levels:
            return levels[max(levels)]
    except (OSError, ValueError):
        pass
    for name in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            size = os.sysconf(name)
        except (ValueError, OSError):
            continue
        if size > 0:
            return size
    return DEFAULT_LLC_BYTES


_threshold = last_level_cache_bytes()


def stream_threshold():
    """Bytes touched above which kernels stream their output."""
    return _threshold


def set_stream_threshold(nbytes=None):
    """Override the threshold (tests use 0 to force streaming); None restores the detected one."""
    global _threshold
    _threshold = last_level_cache_bytes() if nbytes is None else int(nbytes)


def should_stream(*arrays):
    """Whether a kernel reading and writing these arrays once should stream its output."""
    return sum(a.nbytes for a in arrays) > _threshold
