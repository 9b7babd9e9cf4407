"""Compiled Cython kernels of the CPU provider (built from ext/*.pyx).

The hot kernels exist once per ISA level (minitrain._ext.<level>.<name>); this package binds
the level that dispatch.py chose under the plain names, so `from minitrain._ext import conv`
(or `import minitrain._ext.conv`) gets the build this CPU runs.  The other kernels
(loss, optimizer and the like) are single modules built for the baseline level.
"""
import importlib
import sys

from .dispatch import HOT_KERNELS, LEVEL, cpu_info  # noqa: F401  (cpu_info: re-exported)

for _name in sorted(HOT_KERNELS):
    _module = importlib.import_module(f"{__name__}.{LEVEL}.{_name}")
    globals()[_name] = _module
    sys.modules[f"{__name__}.{_name}"] = _module
del _name, _module
