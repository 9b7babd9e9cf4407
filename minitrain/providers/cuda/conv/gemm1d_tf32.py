"""The implicit-GEMM 1-D convolutions of gemm1d.py on TF32 tensor cores, kernels in
cuda/conv_gemm1d_tf32.cu: float32 keys whose math allows TF32 (ConvKey.tf32, the provider's
use_tf32, as PyTorch lets cuDNN convolutions use TF32 by default).

The same three GEMMs and the same staging (the input window and the weights by cp.async, the
im2col operand read from the window, never built), with the products taken by warp-level
mma.sync m16n8k8 on TF32-rounded operands and accumulated in float32.  A warp owns MT x NT
tiles of 16 x 8 outputs: MT is 1 where the M side (output channels; the data gradient's input
channels) has at most 16 rows, else 2.
  * forward and data gradient: M = output channels, N = positions (LINE_NT n-tiles a warp),
    K = input channels x taps, the bias and FusedConv's activation in the epilogue;
  * weight gradient: M = output channels, N = input channels x taps (NT 1 where there are at
    most 8 columns, else 4), K = batch x length cut into slices summed in a fixed order
    (sum_slices): deterministic.
Same limits as gemm1d.py: one group, unit stride and dilation; sm_80 and newer (cp.async,
mma.sync .tf32).
"""
from __future__ import annotations

from ..compiler import Kernel
from ..launch import GEMM1D_TF32_LINE_NT, WARP
from .gemm1d import CHUNK_BUDGET, MAX_CHUNK, MAX_LAYERS, MAX_THREADS, SHARED_LIMIT
from .gemm1d_base import INT32_MAX, LINE_GEO, Gemm1dBase, up

MMA_M, MMA_N, MMA_K = 16, 8, 8     # the tile of one mma.sync.m16n8k8
MAX_WARPS_M = 2                    # warps of a block along M: 64 rows at most
MAX_WARPS_N_WEIGHT = 3             # warps of a weight-gradient block along N: 96 columns at most
FLOAT = 4

_line = {(direction, mt): Kernel("conv_gemm1d_tf32", f"gemm1d_tf32_{direction}_m{mt}", "PPPPiiiiTT" + LINE_GEO)
         for direction in ("forward", "data") for mt in (1, 2)}
_weight = {(mt, nt): Kernel("conv_gemm1d_tf32", f"gemm1d_tf32_weight_m{mt}n{nt}", "PPPqiii" + LINE_GEO)
           for mt in (1, 2) for nt in (1, 4)}


def _m_tiles(rows):
    """(MT, warps along M) for `rows` rows of M."""
    mt = 1 if rows <= MMA_M else 2
    return mt, min(MAX_WARPS_M, -(-rows // (mt * MMA_M)))


def line_shared(chunk, k, bm, bn):
    """Shared bytes of a forward / data block: the weights (K rows up to a multiple of 8, bm + 8
    apart), the window of `chunk` channels and a row of bn zeros, the K rows' window offsets."""
    rows = up(chunk * k, MMA_K)
    return (rows * (bm + 8) + chunk * (bn + k - 1) + bn + rows) * FLOAT


def line_launch(lg, budget, max_warps):
    """(MT, warps along N, warps along M, chunk of input channels, shared bytes) of a forward /
    data launch: at most `max_warps` warps and no more positions than the length needs, the
    chunk staging at most `budget` bytes where one channel fits; None when one input channel
    exceeds SHARED_LIMIT."""
    in_channels, out_channels, _, out_len, k, _ = lg
    mt, warps_m = _m_tiles(out_channels)
    warps_n = max(1, min(max_warps // warps_m, -(-out_len // (GEMM1D_TF32_LINE_NT * MMA_N))))
    bm, bn = warps_m * mt * MMA_M, warps_n * GEMM1D_TF32_LINE_NT * MMA_N
    if line_shared(1, k, bm, bn) > SHARED_LIMIT:
        return None
    chunk = in_channels
    while chunk > 1 and line_shared(chunk, k, bm, bn) > budget:
        chunk = max(1, min(chunk - 1, chunk * budget // line_shared(chunk, k, bm, bn)))
    return mt, warps_n, warps_m, chunk, line_shared(chunk, k, bm, bn)


def weight_launch(lg):
    """(MT, NT, warps along M, warps along N, layers, chunk positions, shared bytes) of a
    weight-gradient block, or None when a chunk of WARP positions exceeds SHARED_LIMIT.  A chunk
    stages its positions of bm dY rows (chunk + 4 apart) and the X window of the channels the
    tile's bn columns reach (chunk + k apart): as many positions as CHUNK_BUDGET holds (a
    multiple of WARP, at most MAX_CHUNK and no more than the length needs); `layers` warps per
    tile warp split a chunk's k-steps while the threads stay <= MAX_THREADS and the layers'
    sums fit the shared memory."""
    in_channels, out_channels, _, out_len, k, _ = lg
    columns = in_channels * k
    mt, warps_m = _m_tiles(out_channels)
    nt = 1 if columns <= MMA_N else 4
    warps_n = min(MAX_WARPS_N_WEIGHT, -(-columns // (nt * MMA_N)))
    bm, bn = warps_m * mt * MMA_M, warps_n * nt * MMA_N
    window_rows = min(in_channels, (bn - 1) // k + 2)
    per_position = (bm + window_rows) * FLOAT
    chunk = min(MAX_CHUNK, up(out_len, WARP), max(WARP, CHUNK_BUDGET // per_position // WARP * WARP))
    staged = (bm * (chunk + 4) + window_rows * (chunk + k)) * FLOAT
    if staged > SHARED_LIMIT:
        return None
    warps = warps_m * warps_n
    sums = warps * mt * nt * 4 * WARP * FLOAT
    layers = 1
    while 2 * layers * warps * WARP <= MAX_THREADS and 2 * layers <= min(chunk // MMA_K, MAX_LAYERS) \
            and sums <= SHARED_LIMIT:
        layers *= 2
    shared = max(staged, sums) if layers > 1 else staged
    return mt, nt, warps_m, warps_n, layers, chunk, shared


class Gemm1dTf32(Gemm1dBase):
    """Implicit-GEMM 1-D convolution on TF32 tensor cores, for float32 keys that allow TF32; the
    settings are Gemm1dBase's."""
    family = "implicit_gemm_1d_tf32"

    def takes(self, key):
        return key.dtype == "float32" and key.tf32

    def line_fits(self, key, lg):
        launch = line_launch(lg, self.shared_budget, self.max_warps)
        if launch is None:
            return False
        tiles = -(-lg[3] // (launch[1] * GEMM1D_TF32_LINE_NT * MMA_N))
        return key.n * tiles <= INT32_MAX

    def weight_tiling(self, lg, dtype):
        launch = weight_launch(lg)
        if launch is None:
            return None
        mt, nt, warps_m, warps_n, _, chunk, _ = launch
        return warps_m * mt * MMA_M, warps_n * nt * MMA_N, chunk

    def heuristic_rank(self, key):
        return -0.6 if self.supports(key) else 2

    def run_line(self, provider, key, lg, source, w, bias, out, activation):
        mt, warps_n, warps_m, chunk, shared = line_launch(lg, self.shared_budget, self.max_warps)
        bm, bn = warps_m * mt * MMA_M, warps_n * GEMM1D_TF32_LINE_NT * MMA_N
        tiles = -(-lg[3] // bn)
        grid = (key.n * tiles, -(-lg[1] // bm), 1)
        _line[key.direction, mt].function(out.dtype).prepared_async_call(
            grid, (WARP, warps_n, warps_m), provider.stream, int(source.gpudata), int(w.gpudata),
            int(bias.gpudata) if bias is not None else 0, int(out.gpudata), tiles, int(bias is not None), chunk,
            *activation, *lg, shared_size=shared)

    def launch_weight(self, provider, key, lg, cols, img, part, slices, per_slice, tiles):
        mt, nt, warps_m, warps_n, layers, chunk, shared = weight_launch(lg)
        _weight[mt, nt].function(cols.dtype).prepared_async_call(
            (tiles, slices, 1), (WARP, warps_m * warps_n, layers), provider.stream, int(cols.gpudata),
            int(img.gpudata), int(part.gpudata), key.n, per_slice, chunk, warps_m, *lg, shared_size=shared)
