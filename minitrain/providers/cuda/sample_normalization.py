"""CUDA kernels of LayerNormalization, InstanceNormalization, GroupNormalization and their
gradients (cuda/sample_norm.cu), with the CPU kernels' outputs (providers/cpu/sample_normalization.py):
a block per row for Y and dX, a block per affine entry for dscale and dbias, sums in float32
for float16 data.  Nothing is synchronised with the host."""
from ...ops.sample_normalization import layout, stats_shape
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .launch import BLOCK

_forward = Kernel("sample_norm", "sn_forward", "PPPPPPqqqqT")
_grad_input = Kernel("sample_norm", "sn_grad_input", "PPPPPPqqqq")
_grad_params = Kernel("sample_norm", "sn_grad_params", "PPPPPPqqqqq")

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
        _forward.launch(provider, x.dtype, _grid(provider, rows), (BLOCK, 1, 1), x, scale, _ptr(bias), y,
                        _ptr(mean), _ptr(inv_std), rows, cols, period, stride, ctx.attrs["epsilon"])
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
            _grad_input.launch(provider, x.dtype, _grid(provider, rows), (BLOCK, 1, 1), dy, x, scale, mean, inv_std,
                               out["dX"], rows, cols, period, stride)
    make = provider.empty if rows and cols else provider.zeros     # sums over no element are 0
    for name in ("dscale", "dbias"):
        if ctx.wants(name):
            out[name] = make(scale.shape, x.dtype)
    if (ctx.wants("dscale") or ctx.wants("dbias")) and rows and cols and scale.size:
        _grad_params.launch(provider, x.dtype, _grid(provider, scale.size), (BLOCK, 1, 1), dy, x, mean, inv_std,
                            _ptr(out.get("dscale")), _ptr(out.get("dbias")), rows, cols, period, stride, scale.size)
    return out


for _domain, _since, _op in (("", 17, "LayerNormalization"), (MS_DOMAIN, 1, "LayerNormalization"),
                             ("", 6, "InstanceNormalization"), ("", 18, "GroupNormalization")):
    register_kernel(_op, domain=_domain, since=_since, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(normalization)
for _op in ("LayerNormalizationGrad", "InstanceNormalizationGrad", "GroupNormalizationGrad"):
    register_kernel(_op, domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(normalization_grad)
