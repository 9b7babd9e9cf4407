"""Kernels from cuda/*.cu, compiled on first use and cached per process (and on disk, by
pycuda's compiler cache, keyed by source and options), with launch.py's DEFINES as -D flags.

Every .cu file instantiates its kernels for the four element types of CUDA_FLOAT_TYPES as
extern "C" functions named `<kernel>_f16`, `<kernel>_bf16`, `<kernel>_f32` and `<kernel>_f64`
(cuda/common.cuh's MT_FOR_FLOATS).
A `Kernel` names one of them and its argument signature, and launches it on a provider's
stream with a launch configuration computed from the element count (grid-stride loops).
"""
from __future__ import annotations

import os

import numpy as np
import pycuda.driver as driver
from pycuda.compiler import SourceModule
from pycuda.gpuarray import GPUArray

from ...bfloat16 import BFLOAT16_TYPES
from ...ops.schema import GRAPH_FLOAT_TYPES
from .driver import device_ptr
from .launch import BLOCK, DEFINES, grid_stride_blocks

# The element types of the CUDA float kernels: every float type a graph may hold (NumPy's three
# and bfloat16, with ml_dtypes).
CUDA_FLOAT_TYPES = GRAPH_FLOAT_TYPES
SUFFIX = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
          **{dtype: "bf16" for dtype in BFLOAT16_TYPES}}
# the struct code of a scalar argument "T" (the accumulation type's scalar: float for the 16-bit types)
SCALAR_CODE = {dtype: "d" if dtype == np.float64 else "f" for dtype in CUDA_FLOAT_TYPES}
_modules = {}


def source_folder():
    """cuda/ of the source tree (editable installs), else the copy shipped in the package."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for folder in (os.path.join(os.path.dirname(package), "cuda"), os.path.join(package, "cuda")):
        if os.path.isdir(folder):
            return folder
    raise FileNotFoundError(f"minitrain's CUDA sources (cuda/*.cu) are neither beside nor inside {package}")


def module(family):
    """The compiled cuda/<family>.cu of the current device, compiled once per process."""
    mod = _modules.get(family)
    if mod is None:
        folder = source_folder()
        with open(os.path.join(folder, f"{family}.cu")) as f:
            source = f.read()
        major, minor = driver.Context.get_device().compute_capability()
        defines = [f"-D{name}={value}" for name, value in DEFINES.items()]
        mod = SourceModule(source, no_extern_c=True, arch=f"sm_{major}{minor}", include_dirs=[folder],
                           options=["-O3", "-std=c++17"] + defines)
        _modules[family] = mod
    return mod


class Kernel:
    """One kernel of cuda/<family>.cu, for any element type.

    `signature` has one struct code per argument: "P" a device pointer (pass a GPUArray),
    "q" int64, "i" int32, "T" a scalar of the element type's accumulation type (float for
    float16, bfloat16 and float32, double for float64), "f"/"d" float/double whatever the type.
    """

    def __init__(self, family, name, signature):
        self.family, self.name, self.signature = family, name, signature
        self._functions = {}

    def function(self, dtype):
        dtype = np.dtype(dtype)
        fn = self._functions.get(dtype)
        if fn is None:
            fn = module(self.family).get_function(f"{self.name}_{SUFFIX[dtype]}")
            fn.prepare(self.signature.replace("T", SCALAR_CODE[dtype]))
            self._functions[dtype] = fn
        return fn

    def launch(self, provider, dtype, grid, block, *args, shared=0, stream=None):
        """Queue the kernel on `stream` (None: `provider`'s stream) with an explicit grid and block
        (and `shared` bytes of dynamic shared memory)."""
        values = [device_ptr(a) if isinstance(a, GPUArray) else a for a in args]
        self.function(dtype).prepared_async_call(grid, block, provider.stream if stream is None else stream, *values,
                                                 shared_size=shared)

    def launch_elements(self, provider, dtype, count, *args, stream=None):
        """Queue a grid-stride kernel over `count` elements: enough blocks to fill the device,
        no more than the elements need; nothing when count is 0."""
        if count <= 0:
            return
        self.launch(provider, dtype, (grid_stride_blocks(provider, count), 1, 1), (BLOCK, 1, 1), *args,
                    stream=stream)
