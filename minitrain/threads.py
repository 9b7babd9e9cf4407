"""How many OpenMP threads the CPU kernels use (default: OMP_NUM_THREADS, else all cores).

Kernels pass this number to their parallel loops explicitly, so `set_num_threads` takes effect
on the next kernel call without touching the OpenMP runtime's global state.  Each kernel call
reads it once (its per-thread scratch is sized by it), so a change from another Python thread
never reaches a kernel already running.  Kernels size
per-thread scratch by it, so it is bounded: above MAX_THREADS_PER_CORE threads per core, a
warning says so and the count is clamped."""
import os
import warnings

MAX_THREADS_PER_CORE = 4


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
    """OMP_NUM_THREADS' first entry when it is a count >= 1 (bounded), else the number of cores."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if first.isdigit() and int(first) >= 1:
        return _bounded(int(first), "OMP_NUM_THREADS")
    return os.cpu_count() or 1


_num_threads = _threads_from_env()

# How long an idle OpenMP thread spins before it sleeps (libgomp reads this when the first
# extension loads; an OMP_WAIT_POLICY or GOMP_SPINCOUNT of the user's wins).  Each kernel is
# one parallel region, and waking a sleeping thread costs a region tens of microseconds where
# a spinning one costs about one.  libgomp's default spin (about 3 ms) starves the working
# threads when another process holds a core; SPIN_COUNT (about 0.1 ms) still bridges the gaps
# between a training step's kernels.  OMP_WAIT_POLICY=PASSIVE, which never spins, is the
# setting for a machine known to be loaded.  The measurements: docs/measurements.md ("OpenMP
# wait policy").  Only libgomp reads GOMP_SPINCOUNT (LLVM's libomp would keep its own KMP_BLOCKTIME), and only
# if it loads after this: torch's wheel ships a libgomp.so.1 too, and with torch imported
# first, its copy serves both with libgomp's defaults.
SPIN_COUNT = 10000
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)


def get_num_threads():
    return _num_threads


def set_num_threads(n):
    """Set the number of threads of minitrain's CPU kernels (n >= 1; above max_threads() a
    warning, and max_threads())."""
    global _num_threads
    if int(n) < 1:
        raise ValueError(f"set_num_threads: n must be >= 1, got {n!r}")
    _num_threads = _bounded(int(n), "set_num_threads")
