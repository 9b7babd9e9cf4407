"""Direct algorithms of the conv search for 1D and 2D groups of few channels (depthwise
convolutions, first layers on gray images), kernels in cuda/conv_tiled.cu:

  * Tiled: a block computes a tile of one output plane of one (sample, group) from the input
    window and the group's weights staged in shared memory; its weight gradient keeps every
    tap's sum of a slice of (sample, row) pairs in registers, one block per (weight channel
    pair, slice), and the slices are added in a fixed order.  Two instances with different
    tile heights are timed by the search.
  * Rows: 4 neighbouring outputs of a row per thread from source values held in registers (no
    shared memory, no barrier), for kernels 3 or 5 wide with unit column stride and dilation;
    forward, and the data gradient with unit strides.

Both stage at most MAX_CHANNELS channels per group; Tiled's weight gradient takes at most
MAX_TAPS taps and its windows no more shared memory than SHARED_LIMIT; other keys are left to
the other algorithms.
"""
from __future__ import annotations

import numpy as np

from ..compiler import Kernel
from ..launch import BLOCK, MAX_GRID_Y, ROWS_X
from .bias import sum_slices
from .epilogue import activation_args

MAX_CHANNELS = 32
MAX_TAPS = 25
MAX_WEIGHT_WORK = 1 << 14      # weight elements (pairs x taps) the weight gradient takes on
SHARED_LIMIT = 48 << 10
SLICE_BLOCKS = 512             # weight-gradient blocks to aim for (about 4 per H100 multiprocessor)
TILE_GEO = "i" * 15

_forward = Kernel("conv_tiled", "tiled_forward", "PPPPqiiiTT" + TILE_GEO)
_data = Kernel("conv_tiled", "tiled_data", "PPPPqii" + TILE_GEO)
_data_unit = Kernel("conv_tiled", "tiled_data_unit", "PPPPqii" + TILE_GEO)
_weight = {9: Kernel("conv_tiled", "tiled_weight_t9", "PPPqq" + TILE_GEO),
           25: Kernel("conv_tiled", "tiled_weight_t25", "PPPqq" + TILE_GEO)}


def tile_geo(geom):
    """TileGeo's 15 ints (group, c, m, ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw; 1D as a
    single row), or None for a 3D geometry."""
    if len(geom.kernel) > 2:
        return None

    def two(values, fill):
        return (fill,) * (2 - len(values)) + tuple(int(v) for v in values)
    group = geom.group
    return ((group, geom.img_channels // group, geom.col_channels // group) + two(geom.img_spatial, 1)
            + two(geom.col_spatial, 1) + two(geom.kernel, 1) + two(geom.strides, 1) + two(geom.dilations, 1)
            + two(geom.pads_begin, 0))


def _acc_itemsize(dtype):
    return 8 if np.dtype(dtype) == np.float64 else 4


def launch_shape(direction, tg, dtype, max_rows):
    """(threads x, threads y, rows per thread, shared bytes) of a forward or data launch, or None
    when even one row per thread needs more than SHARED_LIMIT: whole rows of 256 threads for
    single-row planes, else 32 (fewer for narrow planes) columns by 256 / 32 threads, each
    thread `max_rows` rows (fewer where the staged window would not fit)."""
    _, c, m, ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, _, _ = tg
    height, width = (oh, ow) if direction == "forward" else (ih, iw)
    if height == 1:
        bx, options = BLOCK, [(1, 1)]
    else:
        bx = 32 if width > 16 else 16 if width > 8 else 8
        options = [(BLOCK // bx, r) for r in (4, 2, 1) if r <= max_rows]
    for by, rows in options:
        if direction == "forward":
            window = ((by * rows - 1) * sh + (kh - 1) * dh + 1) * ((bx - 1) * sw + (kw - 1) * dw + 1) * c
        else:
            window = ((by * rows - 1 + (kh - 1) * dh) // sh + 2) * ((bx - 1 + (kw - 1) * dw) // sw + 2) * m
        shared = (window + m * c * kh * kw) * _acc_itemsize(dtype)
        if shared <= SHARED_LIMIT:
            return bx, by, rows, shared
    return None


class Tiled:
    """Tiled direct convolution (shared-memory windows); no workspace but the weight
    gradient's slice partials.  `rows_per_thread` sets the tile height of the forward and data
    kernels (more rows: less window overhead; fewer: more blocks); the search times the two
    instances of conv.py.  FusedConv's bias and activation in the forward's epilogue."""
    family = "direct_tiled"
    deterministic = True
    fuses_activation = True

    def __init__(self, rows_per_thread, name):
        self.rows_per_thread, self.name = rows_per_thread, name

    def supports(self, key):
        tg = tile_geo(key.geom)
        if tg is None:
            return False
        group, c, m, kh, kw = tg[0], tg[1], tg[2], tg[7], tg[8]
        if key.direction == "weight":
            return kh * kw <= MAX_TAPS and group * m * c * kh * kw <= MAX_WEIGHT_WORK
        staged = c if key.direction == "forward" else m
        return staged <= MAX_CHANNELS and launch_shape(key.direction, tg, key.dtype, self.rows_per_thread) is not None

    @staticmethod
    def _slices(key, tg):
        """(slices, (sample, row) pairs per slice) of the weight gradient."""
        group, c, m, oh = tg[0], tg[1], tg[2], tg[5]
        rows = key.n * oh
        want = max(1, min(rows, -(-SLICE_BLOCKS // (group * m * c))))
        per_slice = -(-rows // want)
        return -(-rows // per_slice), per_slice

    def workspace_bytes(self, key):
        if key.direction != "weight":
            return 0
        tg = tile_geo(key.geom)
        slices, _ = self._slices(key, tg)
        return slices * key.geom.col_channels * tg[1] * tg[7] * tg[8] * _acc_itemsize(key.dtype)

    def heuristic_rank(self, key):
        return -0.5 if self.supports(key) else 2

    def run(self, provider, key, buffers):
        tg = tile_geo(key.geom)
        if key.direction == "weight":
            self._weight(provider, key, tg, *buffers)
            return
        source, w, bias, out = buffers
        height, width = (tg[5], tg[6]) if key.direction == "forward" else (tg[3], tg[4])
        bx, by, rows, shared = launch_shape(key.direction, tg, out.dtype, self.rows_per_thread)
        grid = (-(-width // bx) * -(-height // (by * rows)), min(key.n * tg[0], MAX_GRID_Y), 1)
        if key.direction == "forward":
            kernel, epilogue = _forward, activation_args(key)
        else:
            kernel, epilogue = _data_unit if tg[9] == tg[10] == 1 else _data, ()
        kernel.function(out.dtype).prepared_async_call(
            grid, (bx, by, 1), provider.stream, int(source.gpudata), int(w.gpudata),
            int(bias.gpudata) if bias is not None else 0, int(out.gpudata), key.n, int(bias is not None), rows,
            *epilogue, *tg, shared_size=shared)

    def _weight(self, provider, key, tg, cols, img, dw):
        slices, per_slice = self._slices(key, tg)
        taps = tg[7] * tg[8]
        pairs = key.geom.col_channels * tg[1]
        part = provider.empty((slices * pairs * taps,), np.float64 if dw.dtype == np.float64 else np.float32)
        _weight[9 if taps <= 9 else 25].launch(provider, dw.dtype, (slices * pairs, 1, 1), (BLOCK, 1, 1), cols, img,
                                               part, key.n, per_slice, *tg)
        sum_slices(provider, part, dw, dw.size, slices)


_rows = {(direction, kw): Kernel("conv_tiled", f"rows_{direction}_k{kw}", "PPPPqiiTT" + TILE_GEO)
         for direction in ("forward", "data") for kw in (3, 5)}


class Rows:
    """Register-tiled direct convolution (4 neighbouring outputs per thread, no shared memory)
    for kernels 3 or 5 wide with unit column stride and dilation: the forward, and the data
    gradient where both strides are 1; few channels per group, like Tiled.  FusedConv's bias and
    activation in the forward's epilogue."""
    name = "direct_rows"
    deterministic = True
    fuses_activation = True

    def supports(self, key):
        tg = tile_geo(key.geom)
        if tg is None or key.direction == "weight":
            return False
        c, m, kw, sh, sw, dw = tg[1], tg[2], tg[8], tg[9], tg[10], tg[12]
        staged = c if key.direction == "forward" else m
        unit = sw == 1 and dw == 1 and (key.direction == "forward" or sh == 1)
        return unit and kw in (3, 5) and staged <= MAX_CHANNELS

    def workspace_bytes(self, key):
        return 0

    def heuristic_rank(self, key):
        return -0.6 if self.supports(key) else 2

    def run(self, provider, key, buffers):
        tg = tile_geo(key.geom)
        source, w, bias, out = buffers
        height, width = (tg[5], tg[6]) if key.direction == "forward" else (tg[3], tg[4])
        planes = key.n * key.geom.col_channels if key.direction == "forward" else key.n * key.geom.img_channels
        positions = height * -(-width // ROWS_X)
        grid = (min(-(-positions // BLOCK), 1024), min(planes, MAX_GRID_Y), 1)
        _rows[key.direction, tg[8]].launch(provider, out.dtype, grid, (BLOCK, 1, 1), source, w,
                                           bias if bias is not None else 0, out, key.n, int(bias is not None),
                                           *activation_args(key), *tg)
