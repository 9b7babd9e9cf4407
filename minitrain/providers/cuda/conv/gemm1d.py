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
elements (gemm1d_base.py), beyond which cuBLAS and cuDNN's larger tiles are the better choice.
"""
from __future__ import annotations

import numpy as np

from ..compiler import Kernel
from ..launch import GEMM1D_TILE, WARP
from .gemm1d_base import INT32_MAX, LINE_GEO, Gemm1dBase, up

SPAN = WARP * GEMM1D_TILE      # positions of a forward / data tile (a warp's 32 lanes x the register tile)
WEIGHT_ROWS, WEIGHT_COLS = 64, 96   # the largest dW tile of a block (output channels x columns)
MAX_THREADS = 256
MAX_LAYERS = 64                # CUDA's limit on a block's z dimension
SHARED_LIMIT = 48 << 10
CHUNK_BUDGET = 28 << 10        # bytes a weight-gradient chunk of positions aims to stage
MAX_CHUNK = 256                # positions of a weight-gradient chunk at most

_line = {direction: Kernel("conv_gemm1d", f"gemm1d_{direction}", "PPPPiiiiTT" + LINE_GEO)
         for direction in ("forward", "data")}
_weight = Kernel("conv_gemm1d", "gemm1d_weight", "PPPqii" + LINE_GEO)


def _acc_itemsize(dtype):
    return 8 if np.dtype(dtype) == np.float64 else 4


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
    bm, bn = min(WEIGHT_ROWS, up(out_channels, GEMM1D_TILE)), min(WEIGHT_COLS, up(in_channels * k, GEMM1D_TILE))
    bx, by = bn // GEMM1D_TILE, bm // GEMM1D_TILE
    item = _acc_itemsize(dtype)
    window_rows = min(in_channels, (bn - 1) // k + 2)
    per_position = (bm + 4 + window_rows) * item
    chunk = min(MAX_CHUNK, up(out_len, WARP), max(WARP, CHUNK_BUDGET // per_position // WARP * WARP))
    staged = (chunk * (bm + 4) + window_rows * (chunk + k)) * item
    if staged > SHARED_LIMIT:
        return None
    layers = 1
    while (2 * layers * bx * by <= MAX_THREADS and 2 * layers <= min(chunk, MAX_LAYERS)
           and bm * bn * item <= SHARED_LIMIT):
        layers *= 2
    shared = max(staged, bm * bn * item) if layers > 1 else staged
    return bx, by, layers, chunk, shared


class Gemm1d(Gemm1dBase):
    """Implicit-GEMM 1-D convolution (register-tiled, shared-memory operands) in the key's element
    type.  `max_warps` counts warps of GEMM1D_TILE output channels each (fewer: smaller blocks,
    the window staged once per channel tile); see Gemm1dBase for the other settings."""
    family = "implicit_gemm_1d"

    def takes(self, key):
        return True

    def line_fits(self, key, lg):
        tiles = -(-lg[3] // SPAN)
        return key.n * tiles <= INT32_MAX and line_launch(lg, key.dtype, self.shared_budget, self.max_warps) is not None

    def weight_tiling(self, lg, dtype):
        launch = weight_launch(lg, dtype)
        if launch is None:
            return None
        bx, by, _, chunk, _ = launch
        return by * GEMM1D_TILE, bx * GEMM1D_TILE, chunk

    def heuristic_rank(self, key):
        return -0.55 if self.supports(key) else 2

    def run_line(self, provider, key, lg, source, w, bias, out, activation):
        warps, chunk, shared = line_launch(lg, out.dtype, self.shared_budget, self.max_warps)
        tiles = -(-lg[3] // SPAN)
        grid = (key.n * tiles, -(-lg[1] // (warps * GEMM1D_TILE)), 1)
        _line[key.direction].function(out.dtype).prepared_async_call(
            grid, (WARP, warps, 1), provider.stream, int(source.gpudata), int(w.gpudata),
            int(bias.gpudata) if bias is not None else 0, int(out.gpudata), tiles, int(bias is not None), chunk,
            *activation, *lg, shared_size=shared)

    def launch_weight(self, provider, key, lg, cols, img, part, slices, per_slice, tiles):
        bx, by, layers, chunk, shared = weight_launch(lg, cols.dtype)
        _weight.function(cols.dtype).prepared_async_call(
            (tiles, slices, 1), (bx, by, layers), provider.stream, int(cols.gpudata), int(img.gpudata),
            int(part.gpudata), key.n, per_slice, chunk, *lg, shared_size=shared)
