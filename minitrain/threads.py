"""How many OpenMP threads the CPU kernels use.

The count: OMP_NUM_THREADS, else the cores this process may run on (its affinity mask, which
taskset or a container may narrow below os.cpu_count()).  Kernels pass `kernel_threads()` to
their parallel loops explicitly, so `set_num_threads` takes effect on the next kernel call
without touching the OpenMP runtime's global state.  Each kernel call reads it once (its
per-thread scratch is sized by it), so a change from another Python thread never reaches a
kernel already running.  Since it sizes scratch, it is bounded: above MAX_THREADS_PER_CORE
threads per core, a warning says so and the count is clamped.

Dynamic adjustment (OpenMP's dyn-var: on unless OMP_DYNAMIC is false, or `set_dynamic(False)`):
while other processes keep some of those cores busy, `kernel_threads()` is one thread per core
they leave free (at least one, at most the set count; minitrain.cpu_load measures it every
LOAD_WINDOW seconds).  A kernel's parallel region ends at a barrier, so a thread on a core that
another process holds makes the whole region wait for that thread's next time slice,
milliseconds for a region of microseconds; on the cores left free the same work runs
undisturbed.

The wait is OpenMP's own (libgomp spins an idle thread about 3 ms before it sleeps; the user's
OMP_WAIT_POLICY or GOMP_SPINCOUNT as set): with the count following the free cores no thread
spins on a core another process holds, and the long spin bridges the gaps between a training
step's kernels (waking a sleeping thread costs a region tens of microseconds).  The
measurements: docs/measurements.md ("OpenMP threads beside other processes") and
bench/contention.py.
"""
import os
import warnings

from .cpu_load import FreeCores

MAX_THREADS_PER_CORE = 4
LOAD_WINDOW = 0.25   # seconds between two measurements of the cores other processes hold


def usable_cores():
    """The CPU ids this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:                 # no affinity masks on this OS
        return list(range(os.cpu_count() or 1))


def max_threads():
    """The largest thread count the kernels accept."""
    return MAX_THREADS_PER_CORE * (os.cpu_count() or 1)


def _bounded(n, source):
    if n > max_threads():
        warnings.warn(f"{source}: {n} threads is more than {MAX_THREADS_PER_CORE} per core on this "
                      f"{os.cpu_count() or 1}-core machine; using {max_threads()}", RuntimeWarning, stacklevel=3)
        return max_threads()
    return n


def _threads_from_env():
    """OMP_NUM_THREADS' first entry when it is a count >= 1 (bounded), else the usable cores."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if first.isdigit() and int(first) >= 1:
        return _bounded(int(first), "OMP_NUM_THREADS")
    return len(usable_cores())


def _dynamic_from_env():
    """False when OMP_DYNAMIC says false (OpenMP's spellings: false, 0), else True."""
    return os.environ.get("OMP_DYNAMIC", "").strip().lower() not in ("false", "0")


_num_threads = _threads_from_env()
_dynamic = _dynamic_from_env()
_free_cores = FreeCores(usable_cores(), LOAD_WINDOW)


def get_num_threads():
    """The set thread count: the most a kernel uses."""
    return _num_threads


def kernel_threads():
    """The threads the next kernel call uses: get_num_threads(), or fewer while other processes
    hold cores of this process's (dynamic adjustment)."""
    return min(_num_threads, _free_cores.current()) if _dynamic else _num_threads


def set_num_threads(n):
    """Set the number of threads of minitrain's CPU kernels (n >= 1; above max_threads() a
    warning, and max_threads()); with dynamic adjustment, the most they use."""
    global _num_threads
    if int(n) < 1:
        raise ValueError(f"set_num_threads: n must be >= 1, got {n!r}")
    _num_threads = _bounded(int(n), "set_num_threads")


def get_dynamic():
    """Whether the kernels use fewer threads while other processes hold cores."""
    return _dynamic


def set_dynamic(enabled):
    """Turn dynamic adjustment on or off (OMP_DYNAMIC's default: on)."""
    global _dynamic
    if not isinstance(enabled, bool):
        raise TypeError(f"set_dynamic: enabled must be True or False, got {enabled!r}")
    _dynamic = enabled
