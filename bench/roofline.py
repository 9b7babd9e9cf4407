"""The machine's ceiling for memory-bound kernels: STREAM's Add (c = a + b) on arrays of a
case's size, built from bench/stream_add.c with the C compiler (-O3 -march=native -fopenmp,
as minitrain's extensions) and called through ctypes.  A kernel that reads two arrays and
writes a third with plain stores cannot beat it by more than noise, so it tells a tie with a
peer at the ceiling from a kernel that has room left.  (Streaming stores skip the read of each
output line and can pass it where the data outgrows the cache; on the Intel guest of
2026-11-25 they did not.)"""
import ctypes
import os
import shutil
import subprocess
import tempfile

import numpy as np

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stream_add.c")


def build_stream_add():
    """The compiled stream_add function, or None without a C compiler with OpenMP."""
    cc = os.environ.get("CC", "cc").split()
    if not cc or shutil.which(cc[0]) is None:
        return None
    with tempfile.TemporaryDirectory(prefix="minitrain-bench-") as tmp:
        lib = os.path.join(tmp, "stream_add.so")
        build = subprocess.run([*cc, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", SOURCE, "-o", lib],
                               capture_output=True, text=True)
        if build.returncode != 0:
            print(f"  roofline: {' '.join(cc)} could not build {SOURCE}: {build.stderr.strip()[:200]}")
            return None
        fn = ctypes.CDLL(lib).stream_add       # loaded: the file may go with the folder
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_int]
    fn.restype = None
    return fn


def stream_add_case(stream_add, shape, threads):
    """A no-argument callable running STREAM Add over three fresh float32 arrays of `shape`."""
    a, b = np.ones(shape, np.float32), np.full(shape, 2, np.float32)
    c = np.empty_like(a)
    arrays = (a, b, c)      # the closure keeps them alive: ctypes holds bare addresses

    def run():
        stream_add(*(x.ctypes.data for x in arrays), a.size, threads)
    run()
    assert np.all(c == 3), "stream_add wrote the wrong sums"
    return run
