"""The conv search's optional on-disk cache of rankings, so a new process skips the timing.

One small JSON file per (device name, cuDNN version, ConvKey), named by a hash of the three and
holding them in full (a hash collision reads as a miss) with the ranking as algorithm names,
fastest first.  Files are written to a temporary name and renamed into place, so a reader never
sees half a file; a file that cannot be read or parsed is ignored (logged once) and rewritten by
the next search of its key.  The default folder sits beside pycuda's compiler cache
(platformdirs' user cache folder of "pycuda", or PYCUDA_CACHE_DIR's parent).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile

import pycuda.driver as driver

from ..libs import cudnn

log = logging.getLogger("minitrain.cuda.conv")

FORMAT = 1
_warned = set()


def default_folder():
    """Beside pycuda's kernel cache: <pycuda's user cache folder>/minitrain-conv-search-v1."""
    if "PYCUDA_CACHE_DIR" in os.environ:
        root = os.path.dirname(os.path.abspath(os.environ["PYCUDA_CACHE_DIR"]))
    else:
        import platformdirs
        root = platformdirs.user_cache_dir("pycuda", "pycuda")
    return os.path.join(root, f"minitrain-conv-search-v{FORMAT}")


def _identity(key):
    """What a stored ranking is valid for: the device, the cuDNN version and the key."""
    version = str(cudnn.library().cudnnGetVersion()) if cudnn.available() else "none"
    return {"format": FORMAT, "device": driver.Context.get_device().name(), "cudnn": version, "key": repr(key)}


def _path(folder, identity):
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:40]
    return os.path.join(folder, f"{digest}.json")


def load(folder, key):
    """The stored ranking (algorithm names, best first) of `key`, or None."""
    identity = _identity(key)
    path = _path(folder, identity)
    try:
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
        names = entry["ranking"]
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise ValueError("the ranking is not a list of names")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        if path not in _warned:
            _warned.add(path)
            log.warning("conv search: ignoring the unreadable cache file %s (%s: %s)", path, type(e).__name__, e)
        return None
    return names if {k: entry.get(k) for k in identity} == identity else None


def store(folder, key, names):
    """Write the ranking of `key` atomically (a failure to write is logged, not raised)."""
    identity = _identity(key)
    path = _path(folder, identity)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(dict(identity, ranking=list(names)), f)
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
    except OSError as e:
        log.warning("conv search: could not write the cache file %s: %s", path, e)
