"""How many OpenMP threads the CPU kernels use (default: OMP_NUM_THREADS, else all cores).

Kernels pass this number to their parallel loops explicitly, so `set_num_threads` takes effect
on the next kernel call without touching the OpenMP runtime's global state."""
import os

_num_threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0) or (os.cpu_count() or 1)


def get_num_threads():
    return _num_threads


def set_num_threads(n):
    """Set the number of threads of minitrain's CPU kernels (n >= 1)."""
    global _num_threads
    if int(n) < 1:
        raise ValueError(f"set_num_threads: n must be >= 1, got {n!r}")
    _num_threads = int(n)
