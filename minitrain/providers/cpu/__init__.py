"""The CPU provider: NumPy arrays in host memory, kernels from the Cython core (minitrain._ext).

Importing this package imports every module in it, which registers every CPU kernel; each
family lives in a module of its own.
"""
import importlib
import pkgutil

import numpy as np

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


class CpuProvider:
    name = "cpu"

    @staticmethod
    def from_numpy(array):
        """Kernels see C-contiguous buffers; a contiguous input is passed without a copy
        (kernels never write into their inputs)."""
        return np.ascontiguousarray(array)

    @staticmethod
    def to_numpy(value):
        return value


PROVIDER = CpuProvider()
