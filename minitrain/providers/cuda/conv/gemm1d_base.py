"""What the implicit-GEMM 1-D convolution families (gemm1d.py in the key's type, gemm1d_tf32.py
on TF32 tensor cores) share: the keys they take, the line geometry of a primitive, the weight
gradient's slices and their partial sums, and the dispatch of a primitive to its launch.

A family subclasses Gemm1dBase with its element-type rule (`takes`), its forward / data launch
(`line_fits`, `run_line`) and its weight-gradient tiling and launch (`weight_tiling`,
`launch_weight`).
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from .bias import sum_slices
from .epilogue import activation_args

MAX_REDUCTION = 1024           # products per output of the forward and data primitives (channels x taps)
MAX_WEIGHT = 1 << 16           # weight elements the weight gradient takes on
INT32_MAX = 2 ** 31 - 1
LINE_GEO = "i" * 6             # LineGeo: in / out channels, in / out length, taps, pad


def up(value, multiple):
    """value rounded up to a multiple of `multiple`."""
    return -(-value // multiple) * multiple


def line_geo(direction, geom):
    """LineGeo's six ints of a primitive: the forward's (image -> columns) for "forward" and
    "weight", the columns -> image convolution with pad k - 1 - pad_begin for "data"."""
    k, pad = int(geom.kernel[0]), int(geom.pads_begin[0])
    img_len, col_len = int(geom.img_spatial[0]), int(geom.col_spatial[0])
    if direction == "data":
        return geom.col_channels, geom.img_channels, col_len, img_len, k, k - 1 - pad
    return geom.img_channels, geom.col_channels, img_len, col_len, k, pad


def partial_dtype(dtype):
    """The element type of the weight gradient's slice partials: the accumulation type."""
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


class Gemm1dBase(ABC):
    """An implicit-GEMM 1-D convolution family (one group, unit stride and dilation, any pads); no
    workspace but the weight gradient's slice partials, added in a fixed order (sum_slices):
    deterministic.  The settings, timed per key by the search over the instances of
    conv/kernels.py: `max_warps`, the warps of a forward / data block, `shared_budget`, the
    bytes of its staged chunk, and `slice_blocks`, the weight-gradient blocks to aim for (more
    slices fill the device better but leave more partials to add up)."""
    deterministic = True
    fuses_activation = True

    def __init__(self, name, max_warps, shared_budget, slice_blocks):
        self.name, self.max_warps = name, max_warps
        self.shared_budget, self.slice_blocks = shared_budget, slice_blocks

    @abstractmethod
    def takes(self, key):
        """Whether the family computes in the key's element type and math mode."""

    @abstractmethod
    def line_fits(self, key, lg):
        """Whether a forward / data launch exists for the line geometry `lg`."""

    @abstractmethod
    def weight_tiling(self, lg, dtype):
        """(rows, columns, positions) of a weight-gradient block's dW tile and chunk, or None when
        no chunk fits the shared memory."""

    @abstractmethod
    def run_line(self, provider, key, lg, source, w, bias, out, activation):
        """Queue the forward / data primitive; `activation` is (code, alpha, beta), code -1 for none."""

    @abstractmethod
    def launch_weight(self, provider, key, lg, cols, img, part, slices, per_slice, tiles):
        """Queue the weight gradient's slices into `part` (slices x dW)."""

    def supports(self, key):
        geom = key.geom
        if not self.takes(key):
            return False
        if geom.rank != 1 or geom.group != 1 or geom.strides != (1,) or geom.dilations != (1,):
            return False
        lg = line_geo(key.direction, geom)
        in_channels, out_channels, in_len, out_len, k, _ = lg
        if in_channels * in_len > INT32_MAX or out_channels * out_len > INT32_MAX:
            return False
        if key.direction == "weight":
            return out_channels * in_channels * k <= MAX_WEIGHT and self.weight_tiling(lg, key.dtype) is not None
        return in_channels * k <= MAX_REDUCTION and self.line_fits(key, lg)

    def _slices(self, key, lg):
        """(slices, chunks per slice, dW tiles) of the weight gradient."""
        in_channels, out_channels, _, out_len, k, _ = lg
        rows, columns, chunk = self.weight_tiling(lg, key.dtype)
        tiles = -(-out_channels // rows) * -(-(in_channels * k) // columns)
        chunks = key.n * -(-out_len // chunk)
        want = max(1, min(chunks, -(-self.slice_blocks // tiles)))
        per_slice = -(-chunks // want)
        return -(-chunks // per_slice), per_slice, tiles

    def workspace_bytes(self, key):
        if key.direction != "weight":
            return 0
        lg = line_geo("weight", key.geom)
        slices, _, _ = self._slices(key, lg)
        return slices * lg[1] * lg[0] * lg[4] * np.dtype(partial_dtype(key.dtype)).itemsize

    def run(self, provider, key, buffers):
        lg = line_geo(key.direction, key.geom)
        if key.direction == "weight":
            cols, img, dw = buffers
            slices, per_slice, tiles = self._slices(key, lg)
            part = provider.empty((slices * dw.size,), partial_dtype(dw.dtype))
            self.launch_weight(provider, key, lg, cols, img, part, slices, per_slice, tiles)
            sum_slices(provider, part, dw, dw.size, slices)
            return
        source, w, bias, out = buffers
        self.run_line(provider, key, lg, source, w, bias, out, activation_args(key))
