"""The CPU provider: NumPy arrays in host memory, kernels from the Cython core (minitrain._ext).

Importing this package imports every module in it, which registers every CPU kernel; each
family lives in a module of its own.
"""
import importlib
import pkgutil

import numpy as np

from ..base import Provider
from .step_arena import StepArenas

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


class CpuProvider(Provider):
    """Host memory: native values are NumPy arrays, so no copy is ever made where the caller's
    array is already C-contiguous (kernels never write into their inputs)."""
    name = "cpu"
    host_memory = True
    profiles_step_graphs = True

    def from_numpy(self, array):
        return np.asarray(array, order="C")

    def to_numpy(self, value):
        return value

    def is_native(self, value):
        return isinstance(value, np.ndarray)

    def as_native(self, value):
        return np.asarray(value, order="C")

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def zeros(self, shape, dtype):
        return np.zeros(shape, dtype)

    def fill_zero(self, value):
        value.fill(0)

    def copy_into(self, dst, src):
        np.copyto(dst, src)

    def synchronize(self):
        pass

    def step_graphs(self, executor):
        """The step's large allocations served from a planned arena (step_arena.py)."""
        return StepArenas(executor)


PROVIDER = CpuProvider()
