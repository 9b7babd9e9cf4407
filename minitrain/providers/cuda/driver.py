"""Finding the GPU: pycuda importable, the driver initialised, a device present.  Each missing
piece is a ProviderUnavailableError that names it, never an ImportError from deep inside."""
import os

from ...errors import ProviderUnavailableError

_context = None


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
    """The device sessions run on: MINITRAIN_CUDA_DEVICE, else 0."""
    return int(os.environ.get("MINITRAIN_CUDA_DEVICE", "0"))


def primary_context():
    """The device's primary context, retained and made current once per process, so PyTorch,
    CuPy or another pycuda user in the same process shares it; popped at exit, after the
    memory that minitrain's pools hold is returned."""
    global _context
    if _context is None:
        import atexit

        import pycuda.driver as driver
        device = driver.Device(device_index())
        _context = device.retain_primary_context()
        _context.push()

        def release():
            global _context
            import gc

            from pycuda.tools import clear_context_caches
            from .runtime import release_pools
            gc.collect()            # device objects nobody holds go while the context is current
            release_pools()
            _context.pop()
            _context = None
            clear_context_caches()
        atexit.register(release)
    return _context
