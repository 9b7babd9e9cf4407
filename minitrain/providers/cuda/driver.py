"""The bottom of the CUDA provider: finding the GPU (pycuda importable, the driver initialised, a
device present; each missing piece is a ProviderUnavailableError that names it, never an
ImportError from deep inside), the process's one primary context, device pointers, and the
live providers whose pools are returned before the context goes."""
import atexit
import gc
import os
import weakref

from ...errors import ProviderUnavailableError
from .. import device_index as chosen_device_index

_context = None
_providers = weakref.WeakSet()


def register_provider(provider):
    """Track `provider` (it has a `pool`) so its pool is freed at exit while the context lives."""
    _providers.add(provider)


def release_pools():
    """Free the blocks every live provider's pool holds (at exit, before the context goes)."""
    for provider in list(_providers):
        provider.pool.stop_holding()


def device_ptr(value):
    """The device address of a GPUArray (0 for an empty one), as a kernel argument."""
    return int(value.gpudata) if value.gpudata is not None else 0


def check_available():
    """Raise ProviderUnavailableError unless pycuda can drive a CUDA device here."""
    try:
        import pycuda.driver as driver
    except ImportError as e:
        raise ProviderUnavailableError(
            f"the 'cuda' provider needs pycuda, which is not installed ({e}); "
            "pip install 'minitrain[cuda]' on a machine with an NVIDIA driver") from None
    try:
        driver.init()
    except Exception as e:
        raise ProviderUnavailableError(f"the 'cuda' provider found no usable NVIDIA driver: {e}") from None
    if driver.Device.count() == 0:
        raise ProviderUnavailableError("the 'cuda' provider found no CUDA device (the driver reports 0 devices)")


def device_index():
    """The device sessions run on: MINITRAIN_CUDA_DEVICE, else the one set_device_index chose
    (the local rank of a distributed run: one GPU per rank of a host), else 0."""
    chosen = chosen_device_index()
    return int(os.environ.get("MINITRAIN_CUDA_DEVICE", chosen if chosen is not None else 0))


def primary_context():
    """The device's primary context, retained and made current once per process, so PyTorch,
    CuPy or another pycuda user in the same process shares it; popped at exit, after the
    memory that minitrain's pools hold is returned."""
    global _context
    if _context is None:
        import pycuda.driver as driver      # present: check_available ran when the package loaded
        from pycuda.tools import clear_context_caches
        device = driver.Device(device_index())
        _context = device.retain_primary_context()
        _context.push()

        def release():
            global _context
            gc.collect()            # device objects nobody holds go while the context is current
            release_pools()
            _context.pop()
            _context = None
            clear_context_caches()
        atexit.register(release)
    return _context
