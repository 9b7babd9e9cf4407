"""CPU kernels of LayerNormalization, InstanceNormalization, GroupNormalization and their
gradients (ops/sample_normalization.py): minitrain._ext.sample_normalization over X viewed as
(rows, cols), the affine entry of each element as ops/sample_normalization.layout says.
float16 data is normalised in float32, its statistics stored as float16."""
import numpy as np

from ..._ext import sample_normalization as _norm
from ...ops.sample_normalization import accumulation_dtype, layout, stats_shape
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from ...threads import kernel_threads


def _flat(array, dtype):
    """`array` as a contiguous 1-D array of `dtype` (a view when it already is one)."""
    return np.ascontiguousarray(array, dtype=dtype).reshape(-1)


def normalization(ctx):
    x, scale, bias = (list(ctx.inputs) + [None])[:3]
    rows, cols, period, stride = layout(ctx.op_type, x.shape, ctx.attrs, scale.size)
    acc = accumulation_dtype(x.dtype)
    # the kernel writes every statistic, except those of empty rows (left 0)
    mean, inv_std = (np.empty(rows, acc), np.empty(rows, acc)) if x.size else (np.zeros(rows, acc), np.zeros(rows, acc))
    y = np.empty(x.shape, acc)
    if x.size:
        _norm.forward(_flat(x, acc), _flat(scale, acc), None if bias is None else _flat(bias, acc), y.reshape(-1),
                      mean, inv_std, rows, cols, period, stride, float(ctx.attrs["epsilon"]), kernel_threads())
    stats = stats_shape(ctx.op_type, x.shape, ctx.attrs)
    out = dict(zip(_OUTPUTS[ctx.op_type], (y.astype(x.dtype, copy=False),
                                           *(s.astype(x.dtype, copy=False).reshape(stats) for s in (mean, inv_std)))))
    return {k: v for k, v in out.items() if ctx.wants(k)}


def normalization_grad(ctx):
    dy, x, scale, mean, inv_std = ctx.inputs
    rows, cols, period, stride = layout(ctx.op_type.removesuffix("Grad"), x.shape, ctx.attrs, scale.size)
    acc = accumulation_dtype(x.dtype)
    dx = (np.empty if x.size else np.zeros)(x.shape, acc) if ctx.wants("dX") else None
    sums = ctx.wants("dscale") or ctx.wants("dbias")
    dscale, dbias = (np.zeros(scale.shape, acc), np.zeros(scale.shape, acc)) if sums else (None, None)
    if x.size:
        _norm.backward(_flat(dy, acc), _flat(x, acc), _flat(scale, acc), _flat(mean, acc), _flat(inv_std, acc),
                       None if dx is None else dx.reshape(-1), None if dscale is None else dscale.reshape(-1),
                       None if dbias is None else dbias.reshape(-1), rows, cols, period, stride, kernel_threads())
    out = {"dX": dx, "dscale": dscale, "dbias": dbias}
    return {k: v.astype(x.dtype, copy=False) for k, v in out.items() if ctx.wants(k)}


_OUTPUTS = {"LayerNormalization": ("Y", "Mean", "InvStdDev"), "InstanceNormalization": ("output", "mean", "inv_std_dev"),
            "GroupNormalization": ("Y", "mean", "inv_std_dev")}

for _domain, _since, _op in (("", 17, "LayerNormalization"), (MS_DOMAIN, 1, "LayerNormalization"),
                             ("", 6, "InstanceNormalization"), ("", 18, "GroupNormalization")):
    register_kernel(_op, domain=_domain, since=_since)(normalization)
for _op in ("LayerNormalizationGrad", "InstanceNormalizationGrad", "GroupNormalizationGrad"):
    register_kernel(_op, domain=MS_DOMAIN)(normalization_grad)
