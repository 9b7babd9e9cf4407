"""The CUDA provider: pycuda device arrays (GPUArray) in the device's primary context, one
stream and one caching memory pool per session, kernels compiled on first use from cuda/*.cu.

Layers, each importing only those below it:
  driver.py                 the GPU check, the primary context, device pointers, live providers
  launch.py, compiler.py    launch constants and the -D flags of cuda/*.cu; compiling, launching
  libs/                     ctypes bindings: cuBLAS, cuDNN (legacy and backend API), CUDA Graphs
  capture/                  whole-step CUDA Graph capture, its arena and transfer rings
  layout.py, runtime.py     dense copies of strided views; CudaProvider (session_cache.py's cache)
  conv/                     the convolutions and their algorithm search
  the other modules         the op kernels, registered in the kernel registry

Importing this package checks that pycuda, a driver and a device are there (raising
ProviderUnavailableError naming what is missing), then imports every module in it and its
subpackages, which registers every CUDA kernel.  `import minitrain` never imports it:
get_provider("cuda") does.
"""
import importlib
import pkgutil

from .driver import check_available

check_available()

from .runtime import CudaProvider  # noqa: E402  (needs pycuda, checked above)

for _module in pkgutil.walk_packages(__path__, f"{__name__}."):
    importlib.import_module(_module.name)

PROVIDER = CudaProvider()
