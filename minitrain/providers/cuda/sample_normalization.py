"""CUDA kernels of LayerNormalization, InstanceNormalization, GroupNormalization and their
gradients (cuda/sample_norm.cu), with the CPU kernels' outputs (providers/cpu/sample_normalization.py):
a block per row for Y and dX, a block per affine entry for dscale and dbias; rows of at most
NARROW_COLS columns a thread each, and their per-column dscale and dbias summed by blocks of rows
into partials added in a fixed order.  Sums in float32 for 16-bit data.  Nothing is synchronised
with the host."""
import numpy as np

from ...ops.sample_normalization import layout, stats_shape
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .conv.bias import sum_slices
from .launch import BLOCK, NARROW_COLS, grid_stride_blocks

_forward = Kernel("sample_norm", "sn_forward", "PPPPPPqqqqT")
_grad_input = Kernel("sample_norm", "sn_grad_input", "PPPPPPqqqq")
_grad_params = Kernel("sample_norm", "sn_grad_params", "PPPPPPqqqqq")
_forward_narrow = Kernel("sample_norm", "sn_forward_narrow", "PPPPPPqqqqT")
_grad_input_narrow = Kernel("sample_norm", "sn_grad_input_narrow", "PPPPPPqqqq")
_grad_params_narrow = Kernel("sample_norm", "sn_grad_params_narrow", "PPPPPPqqq")
ROWS_PER_THREAD = 8         # rows each thread of the narrow dscale/dbias kernel sums, at least

OUTPUTS = {"LayerNormalization": ("Y", "Mean", "InvStdDev"), "InstanceNormalization": ("output", "mean", "inv_std_dev"),
           "GroupNormalization": ("Y", "mean", "inv_std_dev")}


def _ptr(value):
    return 0 if value is None else value


def _grid(provider, blocks):
    """Blocks of a block-per-item launch: one per item, at most 32 per multiprocessor."""
    return (max(1, min(blocks, provider.multiprocessors * 32)), 1, 1)


def normalization(ctx):
    x, scale, bias = (list(ctx.inputs) + [None])[:3]
    provider = ctx.provider
    rows, cols, period, stride = layout(ctx.op_type, x.shape, ctx.attrs, scale.size)
    names = OUTPUTS[ctx.op_type]
    stats = stats_shape(ctx.op_type, x.shape, ctx.attrs)
    make = provider.zeros if cols == 0 else provider.empty
    mean, inv_std = (make(stats, x.dtype) if ctx.wants(name) else None for name in names[1:])
    y = provider.empty(x.shape, x.dtype)
    if rows and cols:
        args = (x, scale, _ptr(bias), y, _ptr(mean), _ptr(inv_std), rows, cols, period, stride, ctx.attrs["epsilon"])
        if cols <= NARROW_COLS:
            _forward_narrow.launch(provider, x.dtype, (grid_stride_blocks(provider, rows), 1, 1), (BLOCK, 1, 1), *args)
        else:
            _forward.launch(provider, x.dtype, _grid(provider, rows), (BLOCK, 1, 1), *args)
    out = dict(zip(names, (y, mean, inv_std)))
    return {k: v for k, v in out.items() if ctx.wants(k)}


def normalization_grad(ctx):
    dy, x, scale, mean, inv_std = ctx.inputs
    provider = ctx.provider
    rows, cols, period, stride = layout(ctx.op_type.removesuffix("Grad"), x.shape, ctx.attrs, scale.size)
    out = {}
    if ctx.wants("dX"):
        out["dX"] = provider.empty(x.shape, x.dtype)
        if rows and cols:
            args = (dy, x, scale, mean, inv_std, out["dX"], rows, cols, period, stride)
            if cols <= NARROW_COLS:
                _grad_input_narrow.launch(provider, x.dtype, (grid_stride_blocks(provider, rows), 1, 1), (BLOCK, 1, 1),
                                          *args)
            else:
                _grad_input.launch(provider, x.dtype, _grid(provider, rows), (BLOCK, 1, 1), *args)
    make = provider.empty if rows and cols else provider.zeros     # sums over no element are 0
    for name in ("dscale", "dbias"):
        if ctx.wants(name):
            out[name] = make(scale.shape, x.dtype)
    if (ctx.wants("dscale") or ctx.wants("dbias")) and rows and cols and scale.size:
        if cols <= NARROW_COLS and period == stride == 1:
            _narrow_params(provider, dy, x, mean, inv_std, out.get("dscale"), out.get("dbias"), rows, cols)
        else:
            _grad_params.launch(provider, x.dtype, _grid(provider, scale.size), (BLOCK, 1, 1), dy, x, mean, inv_std,
                                _ptr(out.get("dscale")), _ptr(out.get("dbias")), rows, cols, period, stride,
                                scale.size)
    return out


def _narrow_params(provider, dy, x, mean, inv_std, dscale, dbias, rows, cols):
    """dscale and dbias of narrow rows: per-block partial sums, then each column's in a fixed order."""
    blocks = grid_stride_blocks(provider, rows, BLOCK * ROWS_PER_THREAD)
    rows_per_block = -(-rows // blocks)
    blocks = -(-rows // rows_per_block)
    partial = np.float64 if x.dtype == np.float64 else np.float32
    part_bias, part_scale = provider.empty((blocks, cols), partial), provider.empty((blocks, cols), partial)
    _grad_params_narrow.launch(provider, x.dtype, (blocks, 1, 1), (BLOCK, 1, 1), dy, x, mean, inv_std, part_bias,
                               part_scale, rows, cols, rows_per_block)
    for part, result in ((part_bias, dbias), (part_scale, dscale)):
        if result is not None:
            sum_slices(provider, part, result, cols, blocks)


for _domain, _since, _op in (("", 17, "LayerNormalization"), (MS_DOMAIN, 1, "LayerNormalization"),
                             ("", 6, "InstanceNormalization"), ("", 18, "GroupNormalization")):
    register_kernel(_op, domain=_domain, since=_since, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(normalization)
for _op in ("LayerNormalizationGrad", "InstanceNormalizationGrad", "GroupNormalizationGrad"):
    register_kernel(_op, domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(normalization_grad)
