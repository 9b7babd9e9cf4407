"""The convolution algorithm search, after ONNX Runtime's ConvShared (FindAlgorithm, TryAll).

An algorithm is an object with a `name`, `workspace_bytes(key)` (device scratch one run needs),
`supports(key)` and `run(provider, key, buffers)`.  For a ConvKey seen for the first time,
`execute` times every algorithm that supports the key and whose workspace fits (the device's
free memory less 10% for fragmentation, or the options' `workspace_limit` when lower) with CUDA
events on the real buffers, after one untimed warm-up run each (kernel compilation, cuBLAS
set-up), the timed runs queued behind a spin kernel so that only GPU time counts, and caches
the ranking, fastest first, in a bounded LRU.  Every call then tries the
ranked algorithms in order: when one fails (a launch error, a workspace allocation that the
pool cannot serve) the next takes over, and the fallback is logged once per key and algorithm.

An entry of the algorithm list may instead be a family (an object with `for_key(provider,
key)`): on a cache miss it stands for the algorithms it returns for that key, which are then
filtered, timed and ranked with the others.  cuDNN's are two (cudnn_algorithms.py: one
algorithm per algorithm its _v7 heuristic finds for the key; cudnn_engines.py: its engine
configurations; none without libcudnn).

The options (mode, algorithm, deterministic, workspace_limit, cache_dir) are the provider's
`conv_search` (providers/cuda_options.py: a session option, as ONNX Runtime's
cudnn_conv_algo_search is a provider option); the rankings are cached for the process, per key
and the options they depend on.  The counters the tests read are per provider (`stats`).
The math type (TF32 allowed or not) is the provider's `use_tf32`, part of the key.
"""
from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass

import pycuda.driver as driver

from ...cuda_options import check_mode
from . import search_disk as conv_search_disk

log = logging.getLogger("minitrain.cuda.conv")

CACHE_SIZE = 512
FRAGMENTATION = 0.10
TIMED_RUNS = 3
MIN_HOLD, MAX_HOLD = 2e-4, 5e-3     # seconds the stream is held while the timed runs are queued


@dataclass(frozen=True)
class ConvKey:
    """What the ranking of algorithms depends on.  direction: "forward" (image -> columns),
    "data" (columns -> image) or "weight" (the weight gradient); geom: the ConvGeometry (shapes,
    pads, strides, dilations, group); n: the batch; wanted: the gradients the node asks for;
    activation: FusedConv's (code, alpha, beta), applied after the bias (epilogue.py), or None."""
    op: str
    direction: str
    n: int
    geom: object
    dtype: str
    tf32: bool
    wanted: tuple
    activation: tuple = None


class SearchStats:
    """Counters of one provider's searches: searches run (cache misses), cache hits, rankings
    read from disk, candidates timed, fallbacks taken, and the runs of each algorithm."""

    def __init__(self):
        self.searches = self.hits = self.disk_hits = self.timed = self.fallbacks = 0
        self.ran = Counter()    # algorithm name -> runs that succeeded outside timing


def stats(provider):
    """The SearchStats of `provider` (made on first use)."""
    return provider.cache.get("conv search stats", SearchStats)


_rankings: OrderedDict = OrderedDict()     # (ConvKey, ranking settings) -> algorithms, best first
_logged = set()


class AlgorithmFailed(RuntimeError):
    """Every algorithm that fits failed on this key (the last failure is chained)."""


# Failures that make TryAll move on: driver errors (launch, out of memory), the pool's
# MemoryError, and RuntimeErrors from the libraries (cuBLAS, cuDNN status codes).
RECOVERABLE = (driver.Error, MemoryError, RuntimeError)


def clear_cache():
    """Forget every ranking (tests, benchmarks)."""
    _rankings.clear()
    _logged.clear()


def rankings():
    """The cached rankings: ConvKey -> algorithms, best first (the latest where rankings
    under several options exist)."""
    return {key: ranked for (key, _), ranked in _rankings.items()}


def max_workspace(provider):
    """The largest workspace an algorithm may ask for: free device memory less 10%, or the
    provider's limit when lower."""
    free, _ = driver.mem_get_info()
    limit = int(free * (1.0 - FRAGMENTATION))
    cap = provider.conv_search.workspace_limit
    return limit if cap is None else min(limit, int(cap))


def expand(provider, key, algorithms):
    """The algorithm list with each family replaced by its algorithms for `key`."""
    found = []
    for entry in algorithms:
        found.extend(entry.for_key(provider, key) if hasattr(entry, "for_key") else [entry])
    return found


def candidates(provider, key, algorithms):
    """The algorithms that can run `key` under the provider's options and workspace limit."""
    limit, deterministic = max_workspace(provider), provider.conv_search.deterministic
    return [a for a in algorithms
            if a.supports(key) and a.workspace_bytes(key) <= limit and (a.deterministic or not deterministic)]


def _time(provider, algorithm, key, buffers):
    """Milliseconds of one run on the GPU, or None when the algorithm fails: after an untimed
    warm-up, TIMED_RUNS runs queued behind a spin kernel that holds the stream while the host
    queues them (for 1.5x the host time the warm-up took), so the events bracket the kernels
    alone and not the host's launch cost (which differs between the libraries and would
    otherwise decide between kernels of a few microseconds)."""
    try:
        started = time.perf_counter()
        algorithm.run(provider, key, buffers)
        host = time.perf_counter() - started
        start, end = driver.Event(), driver.Event()
        provider.hold(min(MAX_HOLD, max(MIN_HOLD, 1.5 * TIMED_RUNS * host)))
        start.record(provider.stream)
        for _ in range(TIMED_RUNS):
            algorithm.run(provider, key, buffers)
        end.record(provider.stream)
        end.synchronize()
        stats(provider).timed += 1
        return end.time_since(start) / TIMED_RUNS
    except RECOVERABLE as e:
        log.warning("conv algorithm %s failed while timing %s: %s", algorithm.name, key, e)
        return None


def rank(provider, key, algorithms, buffers):
    """The candidate algorithms for `key`, best first, per the provider's search mode."""
    options = provider.conv_search
    check_mode(options.mode)
    found = candidates(provider, key, expand(provider, key, algorithms))
    if options.mode == "heuristic":
        return sorted(found, key=lambda a: a.heuristic_rank(key))
    if options.mode == "fixed":
        return sorted(found, key=lambda a: options.algorithm not in (a.name, getattr(a, "family", None)))
    if len(found) < 2:
        return found
    times = [(_time(provider, a, key, buffers), i, a) for i, a in enumerate(found)]
    return [a for t, _, a in sorted((t, i, a) for t, i, a in times if t is not None)] + \
        [a for t, _, a in times if t is None]


def ranking(provider, key, algorithms, buffers):
    """The cached ranking of `key`, searched on a miss (least recently used entries dropped)."""
    options, counters = provider.conv_search, stats(provider)
    entry = (key, options.ranking_settings())
    ranked = _rankings.get(entry)
    if ranked is not None:
        counters.hits += 1
        _rankings.move_to_end(entry)
        return ranked
    counters.searches += 1
    ranked = None
    disk = options.cache_dir if options.mode == "exhaustive" else None
    if disk:
        ranked = _stored(provider, key, algorithms, conv_search_disk.load(disk, key))
    if ranked is None:
        ranked = rank(provider, key, algorithms, buffers)
        if disk and ranked:
            conv_search_disk.store(disk, key, [a.name for a in ranked])
    _rankings[entry] = ranked
    if len(_rankings) > CACHE_SIZE:
        _rankings.popitem(last=False)
    return ranked


def _stored(provider, key, algorithms, names):
    """The candidates ordered by a stored ranking (those it does not name after), or None
    when there is none or it names no candidate."""
    if not names:
        return None
    found = candidates(provider, key, expand(provider, key, algorithms))
    order = {name: i for i, name in enumerate(names)}
    if not any(a.name in order for a in found):
        return None
    stats(provider).disk_hits += 1
    return sorted(found, key=lambda a: order.get(a.name, len(order)))


def execute(provider, key, algorithms, buffers):
    """Run `key` on `buffers` (the output last) with the best algorithm that succeeds."""
    ranked = ranking(provider, key, algorithms, buffers)
    if not ranked:
        raise AlgorithmFailed(f"no convolution algorithm fits {key} within {max_workspace(provider)} bytes of "
                              "workspace")
    error = None
    for algorithm in ranked:
        try:
            algorithm.run(provider, key, buffers)
            stats(provider).ran[algorithm.name] += 1
            return algorithm
        except RECOVERABLE as e:
            error = e
            stats(provider).fallbacks += 1
            if (key, algorithm.name) not in _logged:
                _logged.add((key, algorithm.name))
                log.warning("conv algorithm %s failed on %s (%s); trying the next one", algorithm.name, key, e)
    raise AlgorithmFailed(f"every convolution algorithm failed on {key}") from error
