"""Implicit-GEMM algorithm of the conv search for 1-D convolutions with moderate channel counts
(the 1D CNNs' middle layers: tens of channels, kernels of a few taps), kernels in
cuda/conv_gemm1d.cu.

Each primitive is a GEMM whose operands are read from the tensors as they lie, through tiles
staged in shared memory, with an 8 x 8 register tile per thread:
  * forward (M = output channels, N = batch x length, K = input channels x taps) and the data
    gradient (M = input channels, K = output channels x taps: the forward of dY with the weight
    transposed and flipped), the bias added and FusedConv's activation applied in the
    epilogue (epilogue.py);
  * the weight gradient (M = output channels, N = input channels x taps, K = batch x length),
    K cut into slices whose partial sums are added in a fixed order (sum_slices): deterministic.

Only one group, unit stride and unit dilation (any pads); the forward and data primitives take
at most MAX_REDUCTION products per output and the weight gradient at most MAX_WEIGHT weight
elements, beyond which cuBLAS and cuDNN's larger tiles are the better choice.
"""
from __future__ import annotations

import numpy as np

from ..compiler import Kernel
from ..launch import GEMM1D_TILE, WARP
from .bias import sum_slices

SPAN = WARP * GEMM1D_TILE      # positions of a forward / data tile (a warp's 32 lanes x the register tile)
MAX_REDUCTION = 1024           # products per output of the forward and data primitives (channels x taps)
MAX_WEIGHT = 1 << 16           # weight elements the weight gradient takes on
WEIGHT_ROWS, WEIGHT_COLS = 64, 96   # the largest dW tile of a block (output channels x columns)
MAX_THREADS = 256
MAX_LAYERS = 64                # CUDA's limit on a block's z dimension
SHARED_LIMIT = 48 << 10
CHUNK_BUDGET = 28 << 10        # bytes a weight-gradient chunk of positions aims to stage
MAX_CHUNK = 256                # positions of a weight-gradient chunk at most
INT32_MAX = 2 ** 31 - 1
LINE_GEO = "i" * 6             # LineGeo: in / out channels, in / out length, taps, pad

_line = {direction: Kernel("conv_gemm1d", f"gemm1d_{direction}", "PPPPiiiiTT" + LINE_GEO)
         for direction in ("forward", "data")}
_weight = Kernel("conv_gemm1d", "gemm1d_weight", "PPPqii" + LINE_GEO)


def _acc_itemsize(dtype):
    return 8 if np.dtype(dtype) == np.float64 else 4


def _up(value, multiple):
    return -(-value // multiple) * multiple


def line_geo(direction, geom):
    """LineGeo's six ints of a primitive: the forward's (image -> columns) for "forward" and
    "weight", the columns -> image convolution with pad k - 1 - pad_begin for "data"."""
    k, pad = int(geom.kernel[0]), int(geom.pads_begin[0])
    img_len, col_len = int(geom.img_spatial[0]), int(geom.col_spatial[0])
    if direction == "data":
        return geom.col_channels, geom.img_channels, col_len, img_len, k, k - 1 - pad
    return geom.img_channels, geom.col_channels, img_len, col_len, k, pad


def line_launch(lg, dtype, budget, max_warps):
    """(warps, chunk of input channels, shared bytes) of a forward / data launch: at most
    `max_warps` warps of GEMM1D_TILE output channels each, the chunk staging at most `budget`
    bytes where one channel fits; None when one input channel's window and weights exceed
    SHARED_LIMIT."""
    in_channels, out_channels, _, _, k, _ = lg
    warps = min(max_warps, -(-out_channels // GEMM1D_TILE))
    per_channel = (k * warps * GEMM1D_TILE + SPAN + k - 1) * _acc_itemsize(dtype)
    if per_channel > SHARED_LIMIT:
        return None
    chunk = max(1, min(in_channels, budget // per_channel))
    return warps, chunk, chunk * per_channel


def weight_launch(lg, dtype):
    """(threads x, y, z, chunk positions, shared bytes) of a weight-gradient block, or None when
    a chunk of WARP positions exceeds SHARED_LIMIT: a bm x bn tile of dW, its `layers` (threads
    z, at most MAX_LAYERS) splitting each chunk's positions while the threads stay <= MAX_THREADS
    and the layers' sums fit the shared memory.  A chunk stages its positions of bm dY rows (rows padded by 4)
    and the X window of the channels that the tile's bn columns reach (rows chunk + k apart):
    as many positions as CHUNK_BUDGET holds (a multiple of WARP, at most MAX_CHUNK and no more
    than the length needs), so that few-channel tiles take long chunks and wait for memory
    less often."""
    in_channels, out_channels, _, out_len, k, _ = lg
    bm, bn = min(WEIGHT_ROWS, _up(out_channels, GEMM1D_TILE)), min(WEIGHT_COLS, _up(in_channels * k, GEMM1D_TILE))
    bx, by = bn // GEMM1D_TILE, bm // GEMM1D_TILE
    item = _acc_itemsize(dtype)
    window_rows = min(in_channels, (bn - 1) // k + 2)
    per_position = (bm + 4 + window_rows) * item
    chunk = min(MAX_CHUNK, _up(out_len, WARP), max(WARP, CHUNK_BUDGET // per_position // WARP * WARP))
    staged = (chunk * (bm + 4) + window_rows * (chunk + k)) * item
    if staged > SHARED_LIMIT:
        return None
    layers = 1
    while (2 * layers * bx * by <= MAX_THREADS and 2 * layers <= min(chunk, MAX_LAYERS)
           and bm * bn * item <= SHARED_LIMIT):
        layers *= 2
    shared = max(staged, bm * bn * item) if layers > 1 else staged
    return bx, by, layers, chunk, shared


class Gemm1d:
    """Implicit-GEMM 1-D convolution (register-tiled, shared-memory operands); no workspace but
    the weight gradient's slice partials.  Two settings trade occupancy against overhead, and
    the search times the instances of conv/kernels.py: `max_warps`, the warps of a forward / data
    block (GEMM1D_TILE output channels each; fewer: smaller blocks, the window staged once per
    channel tile), `shared_budget`, the bytes of its chunk of staged input channels (more: fewer
    barriers, fewer blocks a multiprocessor), and `slice_blocks`, the weight-gradient blocks to
    aim for (more slices fill the device better but leave more partials to add up)."""
    family = "implicit_gemm_1d"
    deterministic = True
    fuses_activation = True

    def __init__(self, name, max_warps, shared_budget, slice_blocks):
        self.name, self.max_warps = name, max_warps
        self.shared_budget, self.slice_blocks = shared_budget, slice_blocks

    def supports(self, key):
        geom = key.geom
        if geom.rank != 1 or geom.group != 1 or geom.strides != (1,) or geom.dilations != (1,):
            return False
        lg = line_geo(key.direction, geom)
        in_channels, out_channels, in_len, out_len, k, _ = lg
        if in_channels * in_len > INT32_MAX or out_channels * out_len > INT32_MAX:
            return False
        if key.direction == "weight":
            return out_channels * in_channels * k <= MAX_WEIGHT and weight_launch(lg, key.dtype) is not None
        tiles = -(-out_len // SPAN)
        return (in_channels * k <= MAX_REDUCTION and key.n * tiles <= INT32_MAX
                and line_launch(lg, key.dtype, self.shared_budget, self.max_warps) is not None)

    def _slices(self, key, lg):
        """(slices, chunks per slice, dW tiles) of the weight gradient."""
        in_channels, out_channels, _, out_len, k, _ = lg
        bx, by, _, chunk, _ = weight_launch(lg, key.dtype)
        tiles = -(-out_channels // (by * GEMM1D_TILE)) * -(-(in_channels * k) // (bx * GEMM1D_TILE))
        chunks = key.n * -(-out_len // chunk)
        want = max(1, min(chunks, -(-self.slice_blocks // tiles)))
        per_slice = -(-chunks // want)
        return -(-chunks // per_slice), per_slice, tiles

    def workspace_bytes(self, key):
        if key.direction != "weight":
            return 0
        lg = line_geo("weight", key.geom)
        slices, _, _ = self._slices(key, lg)
        return slices * lg[1] * lg[0] * lg[4] * _acc_itemsize(key.dtype)

    def heuristic_rank(self, key):
        return -0.55 if self.supports(key) else 2

    def run(self, provider, key, buffers):
        lg = line_geo(key.direction, key.geom)
        if key.direction == "weight":
            self._weight(provider, key, lg, *buffers)
            return
        source, w, bias, out = buffers
        warps, chunk, shared = line_launch(lg, out.dtype, self.shared_budget, self.max_warps)
        tiles = -(-lg[3] // SPAN)
        grid = (key.n * tiles, -(-lg[1] // (warps * GEMM1D_TILE)), 1)
        code, alpha, beta = key.activation if key.activation is not None else (-1, 0.0, 0.0)
        _line[key.direction].function(out.dtype).prepared_async_call(
            grid, (WARP, warps, 1), provider.stream, int(source.gpudata), int(w.gpudata),
            int(bias.gpudata) if bias is not None else 0, int(out.gpudata), tiles, int(bias is not None), chunk, code,
            alpha, beta, *lg, shared_size=shared)

    def _weight(self, provider, key, lg, cols, img, dw):
        slices, per_slice, tiles = self._slices(key, lg)
        bx, by, layers, chunk, shared = weight_launch(lg, dw.dtype)
        part = provider.empty((slices * dw.size,), np.float64 if dw.dtype == np.float64 else np.float32)
        _weight.function(dw.dtype).prepared_async_call(
            (tiles, slices, 1), (bx, by, layers), provider.stream, int(cols.gpudata), int(img.gpudata),
            int(part.gpudata), key.n, per_slice, chunk, *lg, shared_size=shared)
        sum_slices(provider, part, dw, dw.size, slices)
