"""How many OpenMP threads the CPU kernels use (default: OMP_NUM_THREADS, else all cores).

Kernels pass this number to their parallel loops explicitly, so `set_num_threads` takes effect
on the next kernel call without touching the OpenMP runtime's global state."""
import os

_num_threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0) or (os.cpu_count() or 1)

# Idle OpenMP threads sleep rather than spin (read when the first extension loads).  With
# other busy processes on the cores, spinning waiters starve the working threads: a LeNet
# training step took 270-330 ms instead of 5 ms on a loaded 2-core machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def get_num_threads():
    return _num_threads


def set_num_threads(n):
    """Set the number of threads of minitrain's CPU kernels (n >= 1)."""
    global _num_threads
    if int(n) < 1:
        raise ValueError(f"set_num_threads: n must be >= 1, got {n!r}")
    _num_threads = int(n)
