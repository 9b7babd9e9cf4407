"""CUDA kernels of Conv, ConvTranspose, ConvGrad and ConvTransposeGrad.

As on the CPU (providers/cpu/conv.py), three primitives on a ConvGeometry do all the work:
  * forward: columns = W (*) image          (Conv; ConvTransposeGrad's dX)
  * data:    image = W^T (*) columns        (ConvGrad's dX; ConvTranspose)
  * weight:  dW = columns . im2col(image)   (ConvGrad's dW; ConvTransposeGrad's dW, X and dY
                                             swapped, as ONNX Runtime's ConvTransposeGrad does)
and the bias gradient is a per-channel block reduction.  Two algorithms of minitrain's own serve
each primitive, ranked per shape by the search of search.py with cuDNN's (cudnn_algorithms.py
and cudnn_engines.py, when libcudnn 9 loads and the pads are symmetric):
  * Im2colGemm: im2col (vol2col) of a chunk of samples into a pooled workspace, then cuBLAS
    GEMMs strided-batched over samples or groups; col2im gathers the data gradient; the weight
    gradient takes one GEMM per sample and sums the partials in a fixed order.  1x1 stride-1
    unpadded convolutions skip im2col/col2im (the image is the column matrix).
  * Direct: one thread per output element (one block per weight element for dW), for depthwise
    and small-channel convolutions (LeNet's first layer), no workspace.
  * Tiled and Rows (tiled.py): the same shapes in 1D and 2D, from shared-memory windows
    (two tile heights) or from registers (4 outputs of a row per thread, unit column stride).
  * Gemm1d (gemm1d.py): implicit GEMMs for 1D convolutions of moderate channel counts (one
    group, unit stride and dilation), 8 x 8 register tiles from shared-memory operands.
  * Gemm1dTf32 (gemm1d_tf32.py, cuda/conv_gemm1d_tf32.cu): the same on TF32 tensor cores, for
    float32 keys that allow TF32; its _pipe instances hold the weight in each block and keep the
    next source windows in flight while they multiply.
The kernels are in cuda/conv.cu, cuda/conv_tiled.cu, cuda/conv_gemm1d.cu and
cuda/conv_gemm1d_tf32.cu; none uses atomics, so every result is deterministic.  The bias is
bias.py's; Direct, Tiled, Rows and the Gemm1d families apply FusedConv's bias and activation in
their forward kernels (epilogue.py).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ....ops.conv_geometry import geometry_for, packed_geometry
from ....ops.schema import MS_DOMAIN
from ....ops.shape_utils import numel
from ....registry import register_kernel
from ..compiler import CUDA_FLOAT_TYPES, Kernel
from ..driver import device_ptr
from ..launch import BLOCK, MAX_GRID_Y
from . import search as conv_search
from .bias import add_bias, bias_grad
from .cudnn_algorithms import CudnnFamily
from .cudnn_engines import BackendFamily
from .epilogue import activation_args, with_activation
from .gemm1d import Gemm1d
from .gemm1d_tf32 import Gemm1dTf32
from .tiled import Rows, Tiled

# im2col workspace per chunk of samples (at least one sample's worth).
CHUNK_BYTES = 256 << 20
GEO = "i" * 21   # ConvGeo, the last argument of the geometry kernels

_im2col = Kernel("conv", "im2col", "PPq" + GEO)
_col2im = Kernel("conv", "col2im", "PPPqi" + GEO)
_sum_batches = Kernel("conv", "sum_batches", "PPqqi")
_direct_forward = Kernel("conv", "direct_forward", "PPPPqiiTT" + GEO)
_direct_data = Kernel("conv", "direct_data_grad", "PPPPqi" + GEO)
_direct_weight = Kernel("conv", "direct_weight_grad", "PPPq" + GEO)


@lru_cache(maxsize=1024)
def geo_args(geom):
    """The ConvGeo argument (21 ints, every rank as 3D)."""
    return packed_geometry(geom)


class Sizes:
    """Per-group GEMM sizes of a geometry: G, m (column channels), c (image channels),
    K = c * taps (rows of a group's column matrix), P (column positions), image plane."""

    def __init__(self, geom):
        self.g = geom.group
        self.m = geom.col_channels // geom.group
        self.c = geom.img_channels // geom.group
        self.taps = numel(geom.kernel)
        self.k = self.c * self.taps
        self.p = numel(geom.col_spatial)
        self.plane = numel(geom.img_spatial)


def _ptr(value, elements=0):
    """The address of `value`'s element `elements` (a kernel or cuBLAS pointer argument)."""
    return device_ptr(value) + elements * value.dtype.itemsize


def _gemm2(provider, trans_a, trans_b, a, b, c, batches, groups):
    """C[s, g] = op(A[s, g]) @ op(B[s, g]) for samples s < batches and groups g < groups.

    a, b, c: (GPUArray whose last two dims are one matrix, element offset of matrix [0, 0],
    sample stride, group stride).  cuBLAS strided-batched calls take one batch stride, so the
    products run batched over the larger of the two indices, one call per value of the other."""
    if batches == 0 or groups == 0:
        return
    inner_is_group = groups >= batches
    outer, inner = (batches, groups) if inner_is_group else (groups, batches)
    pick = (lambda s, g: (s, g)) if inner_is_group else (lambda s, g: (g, s))
    strides = tuple(pick(s_stride, g_stride)[1] for _, _, s_stride, g_stride in (a, b, c))
    for o in range(outer):
        offsets = tuple(base + o * pick(s_stride, g_stride)[0] for _, base, s_stride, g_stride in (a, b, c))
        provider.blas.gemm_strided_batched(a[0], b[0], c[0], inner, strides, trans_a, trans_b, offsets=offsets)


def _launch_rows(kernel, provider, dtype, rows, width, *args):
    """A kernel whose blocks stride over `rows` along y and over a row's `width` along x."""
    if rows > 0 and width > 0:
        grid = (min(-(-width // BLOCK), 1024), min(rows, MAX_GRID_Y), 1)
        kernel.launch(provider, dtype, grid, (BLOCK, 1, 1), *args)


def _launch_blocks(kernel, provider, dtype, blocks, *args):
    if blocks > 0:
        kernel.launch(provider, dtype, (blocks, 1, 1), (BLOCK, 1, 1), *args)


# --------------------------------------------------------------------------- algorithms
class Im2colGemm:
    """im2col/vol2col + cuBLAS GEMM (strided-batched over samples or groups), col2im for the
    data gradient; the workspace holds the column matrices of a chunk of samples."""
    name = "im2col_gemm"
    deterministic = True

    @staticmethod
    def _sample_bytes(key):
        s = Sizes(key.geom)
        item = np.dtype(key.dtype).itemsize
        columns = 0 if key.geom.is_pointwise else s.g * s.k * s.p
        if key.direction == "weight":
            return (columns + s.g * s.m * s.k) * item
        return columns * item

    def chunk(self, key):
        """Samples per im2col chunk: the whole batch when it fits CHUNK_BYTES."""
        per = self._sample_bytes(key)
        return max(1, min(key.n, CHUNK_BYTES // per)) if per else max(1, key.n)

    def workspace_bytes(self, key):
        return self.chunk(key) * self._sample_bytes(key)

    def supports(self, key):
        return True

    def heuristic_rank(self, key):
        return 1 if Direct.suits(key) else 0

    def run(self, provider, key, buffers):
        getattr(self, key.direction)(provider, key, *buffers)

    def _columns(self, provider, key, img, start, count):
        """The column matrices (count * G, K, P) of samples start.. and the element offset of the
        first one (the image itself when the convolution is 1x1)."""
        s = Sizes(key.geom)
        if key.geom.is_pointwise:
            return img.reshape(img.size // (s.k * s.p), s.k, s.p), start * s.g * s.k * s.p
        col = provider.empty((count * s.g, s.k, s.p), img.dtype)
        _launch_rows(_im2col, provider, img.dtype, count * s.g * s.c, s.p, _ptr(img, start * s.g * s.c * s.plane),
                     col, count, *geo_args(key.geom))
        return col, 0

    def forward(self, provider, key, img, w, bias, out):
        s, n = Sizes(key.geom), key.n
        step = self.chunk(key)
        for start in range(0, n, step):
            count = min(step, n - start)
            col, at = self._columns(provider, key, img, start, count)
            _gemm2(provider, False, False,
                   (w.reshape(s.g, s.m, s.k), 0, 0, s.m * s.k),
                   (col, at, s.g * s.k * s.p, s.k * s.p),
                   (out.reshape(n * s.g, s.m, s.p), start * s.g * s.m * s.p, s.g * s.m * s.p, s.m * s.p), count, s.g)
        if bias is not None:
            add_bias(provider, out, bias, s.g * s.m)

    def data(self, provider, key, cols, w, bias, out):
        s, n, dt = Sizes(key.geom), key.n, cols.dtype
        step = self.chunk(key)
        for start in range(0, n, step):
            count = min(step, n - start)
            direct = key.geom.is_pointwise
            if direct:   # the column matrices are the image
                target = (out.reshape(n * s.g, s.k, s.p), start * s.g * s.k * s.p)
            else:
                col = provider.empty((count * s.g, s.k, s.p), dt)
                target = (col, 0)
            _gemm2(provider, True, False,
                   (w.reshape(s.g, s.m, s.k), 0, 0, s.m * s.k),
                   (cols.reshape(n * s.g, s.m, s.p), start * s.g * s.m * s.p, s.g * s.m * s.p, s.m * s.p),
                   target + (s.g * s.k * s.p, s.k * s.p), count, s.g)
            if not direct:
                _launch_rows(_col2im, provider, dt, count * s.g * s.c, s.plane, col, bias if bias is not None else 0,
                             _ptr(out, start * s.g * s.c * s.plane), count, int(bias is not None),
                             *geo_args(key.geom))
        if bias is not None and key.geom.is_pointwise:
            add_bias(provider, out, bias, s.g * s.c)

    def weight(self, provider, key, cols, img, dw):
        s, n, dt = Sizes(key.geom), key.n, img.dtype
        step = self.chunk(key)
        for start in range(0, n, step):
            count = min(step, n - start)
            col, at = self._columns(provider, key, img, start, count)
            part = provider.empty((count * s.g, s.m, s.k), dt)
            _gemm2(provider, False, True,
                   (cols.reshape(n * s.g, s.m, s.p), start * s.g * s.m * s.p, s.g * s.m * s.p, s.m * s.p),
                   (col, at, s.g * s.k * s.p, s.k * s.p),
                   (part, 0, s.g * s.m * s.k, s.m * s.k), count, s.g)
            _sum_batches.launch_elements(provider, dt, dw.size, part, dw, dw.size, count, int(start > 0))


class Direct:
    """One thread per output element summing over its taps and channels (one block per weight
    element for dW): no workspace; fast when a group has few channels (depthwise, the first
    layer of a network on gray images).  FusedConv's bias and activation in the forward's
    epilogue."""
    name = "direct"
    deterministic = True
    fuses_activation = True
    SMALL = 64      # channels x taps per output below which the heuristic prefers this

    @staticmethod
    def suits(key):
        s = Sizes(key.geom)
        if key.direction == "forward":
            return s.c * s.taps <= Direct.SMALL
        if key.direction == "data":
            return s.m * s.taps <= Direct.SMALL
        return s.c == 1 or s.m == 1 or s.g * s.m * s.k <= 4096

    def workspace_bytes(self, key):
        return 0

    def supports(self, key):
        return True

    def heuristic_rank(self, key):
        return 0 if self.suits(key) else 1

    def run(self, provider, key, buffers):
        getattr(self, key.direction)(provider, key, *buffers)

    def forward(self, provider, key, img, w, bias, out):
        _direct_forward.launch_elements(provider, img.dtype, out.size, img, w, bias if bias is not None else 0, out,
                                        key.n, int(bias is not None), *activation_args(key), *geo_args(key.geom))

    def data(self, provider, key, cols, w, bias, out):
        _direct_data.launch_elements(provider, cols.dtype, out.size, cols, w, bias if bias is not None else 0, out,
                                     key.n, int(bias is not None), *geo_args(key.geom))

    def weight(self, provider, key, cols, img, dw):
        _launch_blocks(_direct_weight, provider, img.dtype, dw.size, cols, img, dw, key.n, *geo_args(key.geom))


ALGORITHMS = [Im2colGemm(), Direct(), Tiled(4, "direct_tiled"), Tiled(1, "direct_tiled_r1"), Rows(),
              Gemm1d("implicit_gemm_1d", max_warps=8, shared_budget=32 << 10, slice_blocks=256),
              Gemm1d("implicit_gemm_1d_fine", max_warps=4, shared_budget=12 << 10, slice_blocks=1024),
              Gemm1dTf32("implicit_gemm_1d_tf32", max_warps=8, shared_budget=32 << 10, slice_blocks=256),
              Gemm1dTf32("implicit_gemm_1d_tf32_fine", max_warps=4, shared_budget=12 << 10, slice_blocks=1024),
              Gemm1dTf32("implicit_gemm_1d_tf32_pipe", max_warps=8, shared_budget=48 << 10, slice_blocks=512,
                         pipeline_tiles=8),
              Gemm1dTf32("implicit_gemm_1d_tf32_pipe_fine", max_warps=4, shared_budget=48 << 10, slice_blocks=384,
                         pipeline_tiles=4)]
# cuDNN's legacy algorithms and its backend's engine configurations join per key (heuristic
# mode: after the direct kernel where it suits)
FAMILIES = [CudnnFamily(own_first=Direct.suits), BackendFamily(own_first=Direct.suits)]
# the same for forward keys with an activation (epilogue.py)
WITH_ACTIVATION = [with_activation(entry) for entry in ALGORITHMS + FAMILIES]


def run_primitive(ctx, direction, geom, n, buffers, activation=None):
    """Run one primitive through the search (buffers: inputs..., output); `activation`, for the
    forward only: FusedConv's (code, alpha), applied after the bias."""
    out = buffers[-1]
    if out.size == 0:
        return
    key = conv_search.ConvKey(ctx.op_type, direction, n, geom, out.dtype.name, bool(ctx.provider.use_tf32),
                              tuple(ctx.wanted), activation)
    conv_search.execute(ctx.provider, key, ALGORITHMS + FAMILIES if activation is None else WITH_ACTIVATION, buffers)


# --------------------------------------------------------------------------- kernels
def _forward(ctx, img, w, bias, geom):
    out = ctx.provider.empty((img.shape[0], geom.col_channels) + tuple(geom.col_spatial), img.dtype)
    run_primitive(ctx, "forward", geom, img.shape[0], (img, w, bias, out))
    return out


def _data(ctx, cols, w, bias, geom):
    out = ctx.provider.empty((cols.shape[0], geom.img_channels) + tuple(geom.img_spatial), cols.dtype)
    run_primitive(ctx, "data", geom, cols.shape[0], (cols, w, bias, out))
    return out


def _weight(ctx, cols, img, w_shape, geom):
    dw = ctx.provider.empty(w_shape, img.dtype)
    if img.shape[0] == 0:
        ctx.provider.fill_zero(dw)
    else:
        run_primitive(ctx, "weight", geom, img.shape[0], (cols, img, dw))
    return dw


def _bias(ctx, dy):
    db = ctx.provider.empty((dy.shape[1],), dy.dtype)
    bias_grad(ctx.provider, dy, db)
    return db


def conv_kernel(ctx):
    x, w = ctx.inputs[0], ctx.inputs[1]
    b = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    geom = geometry_for("conv", ctx.who, x.shape, w.shape, ctx.attrs)
    return {"Y": _forward(ctx, x, w, b, geom)}


def conv_transpose_kernel(ctx):
    x, w = ctx.inputs[0], ctx.inputs[1]
    b = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    geom = geometry_for("transpose", ctx.who, x.shape, w.shape, ctx.attrs)
    return {"Y": _data(ctx, x, w, b, geom)}


def conv_grad_kernel(ctx):
    dy, x, w = ctx.inputs
    geom = geometry_for("conv", ctx.who, x.shape, w.shape, ctx.attrs)
    out = {}
    if ctx.wants("dX"):
        out["dX"] = _data(ctx, dy, w, None, geom)
    if ctx.wants("dW"):
        out["dW"] = _weight(ctx, dy, x, w.shape, geom)
    if ctx.wants("dB"):
        out["dB"] = _bias(ctx, dy)
    return out


def conv_transpose_grad_kernel(ctx):
    """ONNX Runtime's ConvTransposeGrad: dX is the forward convolution of dY with W, dW the
    weight gradient with X and dY in swapped roles, dB a reduction of dY."""
    dy, x, w = ctx.inputs
    geom = geometry_for("transpose", ctx.who, x.shape, w.shape, ctx.attrs)
    out = {}
    if ctx.wants("dX"):
        out["dX"] = _forward(ctx, dy, w, None, geom)
    if ctx.wants("dW"):
        out["dW"] = _weight(ctx, x, dy, w.shape, geom)
    if ctx.wants("dB"):
        out["dB"] = _bias(ctx, dy)
    return out


register_kernel("Conv", since=1, end=10, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(conv_kernel)
register_kernel("Conv", since=11, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(conv_kernel)
register_kernel("ConvTranspose", since=1, end=10, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(conv_transpose_kernel)
register_kernel("ConvTranspose", since=11, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(conv_transpose_kernel)
register_kernel("ConvGrad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(conv_grad_kernel)
register_kernel("ConvTransposeGrad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(conv_transpose_grad_kernel)
