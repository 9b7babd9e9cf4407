"""Execution providers, found by name.  Each provider module registers its kernels in the
registry when imported and exposes a `PROVIDER` object implementing providers.base.Provider.
Asking for a provider this machine cannot run raises ProviderUnavailableError."""
import importlib

from .base import Provider

_MODULES = {"cpu": "minitrain.providers.cpu", "cuda": "minitrain.providers.cuda"}
_device_index = None


def set_device_index(index):
    """Choose the GPU of its host that a device provider made later in this process drives
    (distributed.init() passes its local rank: one GPU per rank); None restores the default."""
    global _device_index
    _device_index = None if index is None else int(index)


def device_index():
    """The GPU chosen by set_device_index, or None."""
    return _device_index


def get_provider(name):
    """The provider called `name` ("cpu" or "cuda"), importing it (and its kernels) on first
    use; a Provider object is returned as it is."""
    if isinstance(name, Provider):
        return name
    try:
        module = _MODULES[name]
    except KeyError:
        raise ValueError(f"unknown provider {name!r}; known providers: {sorted(_MODULES)}") from None
    return importlib.import_module(module).PROVIDER


def provider_list(device):
    """The ordered provider names a session on `device` uses: the device first, the CPU as
    the fallback for ops the device has no kernel for (ONNX Runtime's provider list).  Each
    provider is imported, so that its kernels are registered before a placement reads the
    registry (else a plan for "cuda" made before the first get_provider("cuda") would put
    every node on the CPU)."""
    if isinstance(device, (list, tuple)):
        names = list(device)
    else:
        names = [device] if device == "cpu" else [device, "cpu"]
    for name in names:
        get_provider(name)
    return names
