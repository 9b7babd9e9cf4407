"""Execution providers, found by name.  Each provider module registers its kernels in the
registry when imported and exposes a `PROVIDER` object with the same small interface:
`name`, `from_numpy(array)` and `to_numpy(value)`; device values have `.shape` and `.dtype`."""
import importlib

_MODULES = {"cpu": "minitrain.providers.cpu", "cuda": "minitrain.providers.cuda"}


def get_provider(name):
    """The provider called `name` ("cpu" or "cuda"), importing it (and its kernels) on first use."""
    try:
        module = _MODULES[name]
    except KeyError:
        raise ValueError(f"unknown provider {name!r}; known providers: {sorted(_MODULES)}") from None
    return importlib.import_module(module).PROVIDER
