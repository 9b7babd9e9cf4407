"""BLAS for the CPU kernels: SciPy's OpenBLAS (the one scipy.linalg.cython_blas calls), with
control of its thread count.

Every BLAS call of minitrain goes to this one library, so one thread pool is in play besides
OpenMP's.  Small products run on one BLAS thread: waking (and then spinning) a BLAS pool for
a product of a few MFLOP costs more than it saves, and spinning BLAS threads starve the OpenMP
threads of the next kernel on a 2-core machine.  Products of one to a few million
multiply-adds are split by rows over the OpenMP threads instead (ext/gemm_rows.pyx), and
smaller ones call BLAS from there too, in one band.

OpenBLAS's thread count is one setting for the whole process, so `blas_threads` holds a lock
from setting it to restoring it: kernels run from several Python threads at once take turns
at BLAS, instead of one thread's restore undoing another's setting mid-call.
"""
import ctypes
import glob
import os
import threading

import numpy as np
import scipy.linalg
from scipy.linalg import blas as _blas

from ..._ext import gemm_narrow as _narrow
from ..._ext import gemm_rows as _rows
from ..._ext.thresholds import THRESHOLDS
from ...threads import kernel_threads

# Below this many multiply-adds a GEMM runs on one BLAS thread (ext/thresholds.h says why)...
PARALLEL_GEMM_MACS = THRESHOLDS["MIN_PARALLEL_GEMM_MACS"]
# ...split by rows over the OpenMP threads from this many on.
SPLIT_GEMM_MACS = THRESHOLDS["MIN_SPLIT_GEMM_MACS"]
# Float32 products 8 or 16 wide over at least this many rows run in ext/gemm_narrow.pyx.
NARROW_GEMM_ROWS = 256
# Products of fewer multiply-adds run in plain loops (gemm_rows.gemm_small), without BLAS.
SMALL_GEMM_MACS = 16384
# A transposed B with at most 1/64 of A's elements is copied untransposed first: OpenBLAS
# multiplies rows by a transposed narrow matrix slowly (a Linear layer's X W^T, dX = dY W^T).
SMALL_OPERAND_RATIO = 64


class BlasThreads:
    """Reads and sets the thread count of SciPy's OpenBLAS (a no-op when it is not found)."""

    def __init__(self):
        self._set = self._get = None
        libs = os.path.join(os.path.dirname(os.path.dirname(scipy.linalg.__file__)), os.pardir, "scipy.libs")
        for path in glob.glob(os.path.join(libs, "*openblas*.so*")):
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for prefix in ("scipy_openblas", "openblas"):
                setter = getattr(lib, f"{prefix}_set_num_threads", None)
                getter = getattr(lib, f"{prefix}_get_num_threads", None)
                if setter is not None and getter is not None:
                    setter.argtypes, setter.restype = [ctypes.c_int], None
                    getter.argtypes, getter.restype = [], ctypes.c_int
                    self._set, self._get = setter, getter
                    return

    def use(self, n):
        """Set BLAS to n threads; return the previous count (None when unknown)."""
        if self._set is None:
            return None
        old = self._get()
        if old != n:
            self._set(n)
        return old

    def restore(self, old):
        if old is not None and self._set is not None and self._get() != old:
            self._set(old)


BLAS_THREADS = BlasThreads()
_BLAS_LOCK = threading.RLock()


class blas_threads:
    """Context manager: run the body with SciPy's OpenBLAS at n threads, one Python thread at a
    time.  A class rather than a generator, as it is entered around every small GEMM."""
    __slots__ = ("n", "old")

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        _BLAS_LOCK.acquire()
        try:
            self.old = BLAS_THREADS.use(self.n)
        except BaseException:
            _BLAS_LOCK.release()
            raise
        return self

    def __exit__(self, *exc_info):
        try:
            BLAS_THREADS.restore(self.old)
        finally:
            _BLAS_LOCK.release()


def gemm(a, b, trans_a=False, trans_b=False, alpha=1.0, bias=None, scale=None):
    """alpha * op(a) @ op(b) (times scale, then plus bias: rows of the product's width, each
    applied to every row) for C-contiguous 2-D float32/float64 arrays, as a C-contiguous array.  Row-major products are
    column-major products of the transposes: C^T = op(b)^T op(a)^T, and a C-contiguous matrix
    read as Fortran-ordered is its transpose, so nothing is copied; the bias is written into
    the output first and the GEMM adds to it (beta = 1).  Float32 products 8 or 16 wide of many
    rows (a Linear layer's over pixels) go to ext/gemm_narrow.pyx, where the build has AVX, and
    products of a few thousand multiply-adds to plain loops."""
    if trans_b and b.size * SMALL_OPERAND_RATIO <= a.size:
        b, trans_b = np.ascontiguousarray(b.T), False
    m = a.shape[1] if trans_a else a.shape[0]
    k = a.shape[0] if trans_a else a.shape[1]
    n = b.shape[0] if trans_b else b.shape[1]
    threads = kernel_threads()
    if _narrow.FAST and not trans_b and n in _narrow.WIDTHS and a.dtype == np.float32 and b.dtype == np.float32 \
            and a.shape[0] >= NARROW_GEMM_ROWS and a.flags.c_contiguous and b.flags.c_contiguous:
        return _narrow_gemm(a, b, trans_a, alpha, bias, scale, m, n, k, threads)
    if scale is not None:
        c = gemm(a, b, trans_a, trans_b, alpha)
        c *= scale
        if bias is not None:
            c += bias
        return c
    small = m * n * k < PARALLEL_GEMM_MACS and a.flags.c_contiguous and b.flags.c_contiguous
    c = np.empty((m, n), dtype=a.dtype) if small or bias is not None else None
    if bias is not None:
        c[...] = bias
    if small and m * n * k < SMALL_GEMM_MACS:
        _rows.gemm_small(a, b, c, trans_a, trans_b, alpha, bias is not None)
        return c
    if small:
        # one band, or bands over the threads: BLAS called from Cython, without the argument
        # checks and output allocation of SciPy's Python wrapper (several us a call)
        bands = threads if threads > 1 and m >= threads and m * n * k >= SPLIT_GEMM_MACS else 1
        with blas_threads(1):
            if bias is None:
                _rows.gemm_rows(a, b, c, trans_a, trans_b, alpha, bands)
            else:
                _rows.gemm_rows(a, b, c, trans_a, trans_b, alpha, bands, accumulate=True)
        return c
    routine = _blas.sgemm if a.dtype == np.float32 else _blas.dgemm
    with blas_threads(threads if m * n * k >= PARALLEL_GEMM_MACS else 1):
        if bias is None:
            c_t = routine(alpha, b.T, a.T, trans_a=int(trans_b), trans_b=int(trans_a))
        else:
            c_t = routine(alpha, b.T, a.T, beta=1.0, c=c.T, overwrite_c=True, trans_a=int(trans_b),
                          trans_b=int(trans_a))
    return c_t.T


def _narrow_gemm(a, b, trans_a, alpha, bias, scale, m, n, k, threads):
    """gemm's product in ext/gemm_narrow.pyx: op(a) @ b with b (k, n) and n 8 or 16 floats,
    its rows (or, transposed, the rows summed over) split in bands over the threads."""
    c = np.empty((m, n), dtype=np.float32)
    rows = a.shape[0]       # the rows the product runs over (summed over when a is transposed)
    bands = threads if threads > 1 and rows >= threads and m * n * k >= SPLIT_GEMM_MACS else 1
    if trans_a:
        _narrow.tn(a, b, c, alpha, bands)
        if scale is not None:
            c *= scale
        if bias is not None:
            c += bias
    else:
        _narrow.rows(a, b, None if bias is None else np.ascontiguousarray(bias, dtype=np.float32), c, alpha, bands,
                     None if scale is None else np.ascontiguousarray(scale, dtype=np.float32))
    return c
