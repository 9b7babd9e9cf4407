"""The largest tensor a node may produce.

Attributes (pads, strides, output_shape) can imply outputs that no machine holds.  Such a node
fails with a ShapeError that names the op (and node), the output, its shape and byte size and
the attributes that sized it, before anything is planned or allocated: at shape inference when
the shapes are known, else when a plan step first meets its batch's concrete dims.  The limit
is the machine's physical memory, overridden by MINITRAIN_MAX_TENSOR_BYTES (read at import) or
`set_max_tensor_bytes(n)`.
"""
import math
import os

import numpy as np

from .env import count_from_env, require_count
from .errors import ShapeError

# Attributes that set an output's size, named first when a node is refused.
SIZING_ATTRIBUTES = ("pads", "strides", "dilations", "kernel_shape", "output_shape", "output_padding",
                     "auto_pad", "ceil_mode", "shape")


def physical_memory():
    """Bytes of physical memory (1 TiB where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 1 << 40


_max_bytes = count_from_env("MINITRAIN_MAX_TENSOR_BYTES", physical_memory())


def max_tensor_bytes():
    """The largest tensor, in bytes, that a node may produce."""
    return _max_bytes


def set_max_tensor_bytes(nbytes=None):
    """Set the largest tensor a node may produce (bytes >= 1); None restores physical memory."""
    global _max_bytes
    if nbytes is None:
        _max_bytes = physical_memory()
        return
    _max_bytes = require_count("set_max_tensor_bytes", nbytes)


def check_tensor_bytes(who, output, shape, dtype, attrs):
    """Raise ShapeError, naming `who` (the op and node), the output and the attributes that sized
    it, when a tensor of `shape` and `dtype` would exceed max_tensor_bytes()."""
    size = math.prod(shape) * np.dtype(dtype).itemsize
    if size <= _max_bytes:
        return
    given = {k: v for k, v in (attrs or {}).items() if v is not None}
    sizing = {k: given[k] for k in SIZING_ATTRIBUTES if k in given}
    other = {k: v for k, v in given.items() if k not in sizing}
    named = f"attributes {sizing}" + (f" (and {other})" if other else "") if sizing else f"attributes {given}"
    gib = f" ({size / 2 ** 30:.1f} GiB)" if size >= 2 ** 30 else ""
    raise ShapeError(f"{who}: output {output!r} would have shape {tuple(shape)}, {size} bytes{gib}, more than the {_max_bytes} bytes a tensor may take "
                     f"(minitrain.set_max_tensor_bytes, MINITRAIN_MAX_TENSOR_BYTES); check the input "
                     f"shapes and the {named}")
