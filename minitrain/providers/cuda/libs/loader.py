"""Opening the CUDA libraries that the bindings of this folder call through ctypes.

NVIDIA's libraries (cuBLAS, cuDNN) are found by cuda-pathfinder (NVIDIA's locator of CUDA
libraries in pip wheels, conda or the toolkit); the driver library comes with the NVIDIA driver.
A `SharedLibrary` opens its library on first use, once per process, and types the entry points
the binding calls: each returns a C int status unless its signature names another result type.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import threading

from ....errors import ProviderUnavailableError


def nvidia_library_path(name, packages):
    """The file of NVIDIA's lib<name> as cuda-pathfinder finds it; ProviderUnavailableError
    naming `packages` (what to pip install) when cuda-pathfinder is missing or fails."""
    try:
        # cuda-pathfinder is an optional dependency (minitrain[cuda]): imported when a library is needed
        from cuda.pathfinder import load_nvidia_dynamic_lib
    except ImportError as e:
        raise ProviderUnavailableError(
            f"the 'cuda' provider finds lib{name} with cuda-pathfinder, which is not installed ({e}); "
            f"pip install cuda-pathfinder {packages}") from None
    try:
        return load_nvidia_dynamic_lib(name).abs_path
    except Exception as e:
        raise ProviderUnavailableError(
            f"the 'cuda' provider needs lib{name}, which cuda-pathfinder could not load: {e}; "
            f"pip install {packages} or install the CUDA toolkit") from None


def driver_library_path():
    """The CUDA driver library (libcuda) of this machine."""
    return ctypes.util.find_library("cuda") or "libcuda.so.1"


def declare(lib, signatures):
    """Type `lib`'s entry points: {name: argument types} (an int status result) or {name:
    (argument types, result type)}."""
    for name, signature in signatures.items():
        argtypes, restype = signature if isinstance(signature, tuple) else (signature, ctypes.c_int)
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype


class SharedLibrary:
    """A library opened by `open_library()` on the first call, then typed with `signatures`
    (see declare) and kept for the process; calling it returns the ctypes library.  A failed
    open raises and is tried again on the next call."""

    def __init__(self, open_library, signatures):
        self._open, self._signatures = open_library, signatures
        self._library = None
        self._lock = threading.Lock()

    def __call__(self):
        if self._library is None:
            with self._lock:
                if self._library is None:
                    lib = self._open()
                    declare(lib, self._signatures)
                    self._library = lib
        return self._library
