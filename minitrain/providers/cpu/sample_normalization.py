"""CPU kernels of LayerNormalization, InstanceNormalization, GroupNormalization and their
gradients (ops/sample_normalization.py): minitrain._ext.sample_normalization over X viewed as
(rows, cols), the affine entry of each element as ops/sample_normalization.layout says.
float16 data is normalised in float32, its statistics stored as float16."""
import numpy as np

from ..._ext import sample_normalization as _norm
from ...caches import bounded_cache
from ...ops.sample_normalization import accumulation_dtype, layout, stats_shape
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from ...threads import kernel_threads


def _flat(array, dtype):
    """`array` as a contiguous 1-D array of `dtype` (a view when it already is one)."""
    if array.dtype == dtype and array.flags.c_contiguous:
        return array.reshape(-1)
    return np.ascontiguousarray(array, dtype=dtype).reshape(-1)


@bounded_cache("cpu sample normalization layouts")
def _layout(op_type, shape, attrs_key, scale_size, dtype):
    """(rows, cols, period, stride, the accumulation dtype, the statistics' shape) of a call."""
    attrs = dict(attrs_key)
    return (*layout(op_type.removesuffix("Grad"), shape, attrs, scale_size), accumulation_dtype(dtype),
            stats_shape(op_type.removesuffix("Grad"), shape, attrs))


def normalization(ctx):
    x, scale, bias = (list(ctx.inputs) + [None])[:3]
    rows, cols, period, stride, acc, stats = _layout(ctx.op_type, x.shape, ctx.frozen_attrs(), scale.size, x.dtype)
    # the kernel writes every statistic, except those of empty rows (left 0)
    make = np.empty if x.size else np.zeros
    y, mean, inv_std = np.empty(x.shape, acc), make(rows, acc), make(rows, acc)
    if x.size:
        _norm.forward(_flat(x, acc), _flat(scale, acc), None if bias is None else _flat(bias, acc), y.reshape(-1),
                      mean, inv_std, rows, cols, period, stride, float(ctx.attrs["epsilon"]), kernel_threads())
    names = _OUTPUTS[ctx.op_type]
    out = {names[0]: y.astype(x.dtype, copy=False)}
    for name, value in zip(names[1:], (mean, inv_std)):
        if ctx.wants(name):
            out[name] = value.astype(x.dtype, copy=False).reshape(stats)
    return out


def normalization_grad(ctx):
    dy, x, scale, mean, inv_std = ctx.inputs
    rows, cols, period, stride, acc, _ = _layout(ctx.op_type, x.shape, ctx.frozen_attrs(), scale.size, x.dtype)
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
