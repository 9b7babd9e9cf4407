"""The implicit-GEMM 1-D convolutions of gemm1d.py on TF32 tensor cores, kernels in
cuda/conv_gemm1d_tf32.cu: float32 keys whose math allows TF32 (ConvKey.tf32, the provider's
use_tf32, as PyTorch lets cuDNN convolutions use TF32 by default).

The same three GEMMs and the same staging (the input window and the weights by cp.async, the
im2col operand read from the window, never built), with the products taken by warp-level
mma.sync m16n8k8 on TF32-rounded operands and accumulated in float32.  A warp owns MT x NT
tiles of 16 x 8 outputs: MT is 1 where the M side (output channels; the data gradient's input
channels) has at most 16 rows (32 for the pipelined kernel, two warps of 16), else 2.
  * forward and data gradient: M = output channels, N = positions (LINE_NT n-tiles a warp),
    K = input channels x taps, the bias and FusedConv's activation in the epilogue.  The
    instances with `pipeline_tiles` run the pipelined kernel instead (PIPE_NT n-tiles a warp):
    each block converts its rows of the whole weight to TF32 fragments once and strides over
    position tiles, the next tiles' source windows in flight (a ring of 2 or 3) while its warps
    multiply, for keys whose weight fits a block's shared memory;
  * weight gradient: M = output channels, N = input channels x taps (NT 1 where there are at
    most 8 columns, else 4), K = batch x length cut into slices summed in a fixed order
    (sum_slices): deterministic.  A block's chunks of positions go through a ring of 2 or 3
    buffers, dY's rows by 16-byte copies where its rows are 16-byte aligned.
Same limits as gemm1d.py: one group, unit stride and dilation; sm_80 and newer (cp.async,
mma.sync .tf32).
"""
from __future__ import annotations

from ..compiler import Kernel
from ..launch import GEMM1D_TF32_LINE_NT, WARP
from .gemm1d import MAX_CHUNK, MAX_LAYERS, MAX_THREADS, SHARED_LIMIT
from .gemm1d_base import INT32_MAX, LINE_GEO, Gemm1dBase, up

MMA_M, MMA_N, MMA_K = 16, 8, 8     # the tile of one mma.sync.m16n8k8
MAX_WARPS_M = 2                    # warps of a block along M: 64 rows at most
MAX_WARPS_N_WEIGHT = 3             # warps of a weight-gradient block along N: 96 columns at most
PIPE_NT = 4                        # n-tiles of a pipelined forward / data warp (conv_gemm1d_tf32.cu)
RING_BUDGET = 44 << 10             # bytes of a weight-gradient block's ring of chunks
FLOAT = 4

_line = {(direction, mt): Kernel("conv_gemm1d_tf32", f"gemm1d_tf32_{direction}_m{mt}", "PPPPiiiiTT" + LINE_GEO)
         for direction in ("forward", "data") for mt in (1, 2)}
_pipe = {(direction, mt): Kernel("conv_gemm1d_tf32", f"gemm1d_tf32_{direction}_pipe_m{mt}", "PPPPqiiiiff" + LINE_GEO)
         for direction in ("forward", "data") for mt in (1, 2)}
_weight = {(mt, nt): Kernel("conv_gemm1d_tf32", f"gemm1d_tf32_weight_m{mt}n{nt}", "PPPqiiii" + LINE_GEO)
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


def pipe_shared(in_channels, k, bm, bn, stages):
    """Shared bytes of a pipelined forward / data block: the weight's A fragments (K rows up to a
    multiple of 8, bm columns), `stages` windows (in_channels rows bn + up(k + 7, 4) apart, then
    bn zeros) and the K rows' window offsets."""
    rows = up(in_channels * k, MMA_K)
    return (rows * bm + stages * (in_channels * (bn + up(k + 7, 4)) + bn) + rows) * FLOAT


def pipe_launch(lg, budget, max_warps):
    """(MT, warps along N, warps along M, stages, shared bytes) of a pipelined forward / data
    launch, or None when the weight and two windows of WARP positions exceed `budget`: MT 1
    where M has at most 32 rows (two warps of 16), else 2; as many warps along N as `max_warps`
    allows and the length needs, fewer where the shared memory asks, three windows in flight
    where they fit, else two."""
    in_channels, out_channels, _, out_len, k, _ = lg
    mt = 1 if out_channels <= 2 * MMA_M else 2
    warps_m = min(MAX_WARPS_M, -(-out_channels // (mt * MMA_M)))
    bm = warps_m * mt * MMA_M
    most = max(1, min(max_warps // warps_m, -(-out_len // (PIPE_NT * MMA_N))))
    for warps_n in range(most, 0, -1):
        for stages in (3, 2):
            shared = pipe_shared(in_channels, k, bm, warps_n * PIPE_NT * MMA_N, stages)
            if shared <= budget:
                return mt, warps_n, warps_m, stages, shared
    return None


def weight_chunk_bytes(bm, window_rows, chunk, k):
    """Shared bytes of one weight-gradient chunk: bm dY rows chunk + 4 apart, the X window's rows
    chunk + k apart, up to a multiple of 16 bytes."""
    return up(bm * (chunk + 4) + window_rows * (chunk + k), 4) * FLOAT


def weight_launch(lg):
    """(MT, NT, warps along M, warps along N, layers, chunk positions, stages, shared bytes) of a
    weight-gradient block, or None when two chunks of WARP positions exceed RING_BUDGET.  A chunk
    stages its positions of bm dY rows and the X window of the channels the tile's bn columns
    reach; `stages` chunks are in flight at once.  The chunk is the longest that the ring holds
    (a multiple of WARP, no more than the length needs, a power of two where the length is
    longer than MAX_CHUNK), three stages preferred at each length; `layers` warps per tile warp
    split a chunk's k-steps while the threads stay <= MAX_THREADS and the layers' sums fit the
    shared memory."""
    in_channels, out_channels, _, out_len, k, _ = lg
    columns = in_channels * k
    mt, warps_m = _m_tiles(out_channels)
    nt = 1 if columns <= MMA_N else 4
    warps_n = min(MAX_WARPS_N_WEIGHT, -(-columns // (nt * MMA_N)))
    bm, bn = warps_m * mt * MMA_M, warps_n * nt * MMA_N
    window_rows = min(in_channels, (bn - 1) // k + 2)
    longest = min(MAX_CHUNK, up(out_len, WARP))
    lengths = sorted({longest} | {c for c in (256, 128, 64, 32) if c < longest}, reverse=True)
    fits = [(chunk, stages) for chunk in lengths for stages in (3, 2)
            if stages * weight_chunk_bytes(bm, window_rows, chunk, k) <= RING_BUDGET]
    if not fits:
        return None
    chunk, stages = fits[0]
    ring = stages * weight_chunk_bytes(bm, window_rows, chunk, k)
    warps = warps_m * warps_n
    sums = warps * mt * nt * 4 * WARP * FLOAT
    layers = 1
    while 2 * layers * warps * WARP <= MAX_THREADS and 2 * layers <= min(chunk // MMA_K, MAX_LAYERS) \
            and sums <= SHARED_LIMIT:
        layers *= 2
    shared = max(ring, sums) if layers > 1 else ring
    return mt, nt, warps_m, warps_n, layers, chunk, stages, shared


class Gemm1dTf32(Gemm1dBase):
    """Implicit-GEMM 1-D convolution on TF32 tensor cores, for float32 keys that allow TF32; the
    settings are Gemm1dBase's, and `pipeline_tiles`: None for the forward / data kernel that
    stages chunks of input channels tile by tile, else the pipelined one (the whole weight held
    by each block, `shared_budget` its shared bytes), whose blocks take pipeline_tiles position
    tiles each (more: the weight staged fewer times, a longer pipeline; fewer: more blocks to
    balance the multiprocessors)."""
    family = "implicit_gemm_1d_tf32"

    def __init__(self, name, max_warps, shared_budget, slice_blocks, pipeline_tiles=None):
        super().__init__(name, max_warps, shared_budget, slice_blocks)
        self.pipeline_tiles = pipeline_tiles

    def takes(self, key):
        return key.dtype == "float32" and key.tf32

    def line_fits(self, key, lg):
        if self.pipeline_tiles is not None:
            launch = pipe_launch(lg, self.shared_budget, self.max_warps)
            if launch is None:
                return False
            n_tiles = key.n * -(-lg[3] // (launch[1] * PIPE_NT * MMA_N))
            return -(-n_tiles // self.pipeline_tiles) <= INT32_MAX
        launch = line_launch(lg, self.shared_budget, self.max_warps)
        if launch is None:
            return False
        tiles = -(-lg[3] // (launch[1] * GEMM1D_TF32_LINE_NT * MMA_N))
        return key.n * tiles <= INT32_MAX

    def weight_tiling(self, lg, dtype):
        launch = weight_launch(lg)
        if launch is None:
            return None
        mt, nt, warps_m, warps_n, _, chunk, _, _ = launch
        return warps_m * mt * MMA_M, warps_n * nt * MMA_N, chunk

    def heuristic_rank(self, key):
        return -0.6 if self.supports(key) else 2

    def run_line(self, provider, key, lg, source, w, bias, out, activation):
        if self.pipeline_tiles is not None:
            self._run_pipelined(provider, key, lg, source, w, bias, out, activation)
            return
        mt, warps_n, warps_m, chunk, shared = line_launch(lg, self.shared_budget, self.max_warps)
        bm, bn = warps_m * mt * MMA_M, warps_n * GEMM1D_TF32_LINE_NT * MMA_N
        tiles = -(-lg[3] // bn)
        grid = (key.n * tiles, -(-lg[1] // bm), 1)
        _line[key.direction, mt].function(out.dtype).prepared_async_call(
            grid, (WARP, warps_n, warps_m), provider.stream, int(source.gpudata), int(w.gpudata),
            int(bias.gpudata) if bias is not None else 0, int(out.gpudata), tiles, int(bias is not None), chunk,
            *activation, *lg, shared_size=shared)

    def _run_pipelined(self, provider, key, lg, source, w, bias, out, activation):
        mt, warps_n, warps_m, stages, shared = pipe_launch(lg, self.shared_budget, self.max_warps)
        bm, bn = warps_m * mt * MMA_M, warps_n * PIPE_NT * MMA_N
        tiles = -(-lg[3] // bn)
        n_tiles = key.n * tiles
        grid = (-(-n_tiles // self.pipeline_tiles), -(-lg[1] // bm), 1)
        code, alpha, beta = activation
        _pipe[key.direction, mt].function(out.dtype).prepared_async_call(
            grid, (WARP, warps_n, warps_m), provider.stream, int(source.gpudata), int(w.gpudata),
            int(bias.gpudata) if bias is not None else 0, int(out.gpudata), n_tiles, tiles, stages,
            int(bias is not None), code, alpha, beta, *lg, shared_size=shared)

    def launch_weight(self, provider, key, lg, cols, img, part, slices, per_slice, tiles):
        mt, nt, warps_m, warps_n, layers, chunk, stages, shared = weight_launch(lg)
        _weight[mt, nt].function(cols.dtype).prepared_async_call(
            (tiles, slices, 1), (WARP, warps_m * warps_n, layers), provider.stream, int(cols.gpudata),
            int(img.gpudata), int(part.gpudata), key.n, per_slice, chunk, stages, warps_m, *lg, shared_size=shared)
