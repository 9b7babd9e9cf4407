"""The CUDA provider: pycuda device arrays (GPUArray) in the device's primary context, one
stream and one caching memory pool per session, kernels compiled on first use from cuda/*.cu.

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
