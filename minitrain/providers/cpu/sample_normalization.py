"""CPU kernels of LayerNormalization, InstanceNormalization, GroupNormalization and their
gradients (ops/sample_normalization.py): NumPy passes over X viewed as (rows, cols), the
affine entries gathered per (row % period, col) as ops/sample_normalization.layout says.
Sums run in float32 for float16 data, in the data's type otherwise."""
import numpy as np

from ...ops.sample_normalization import layout, accumulation_dtype, stats_shape
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel


def _affine_table(param, rows_layout):
    """The affine entry of each (row % period, col), shape (period, cols)."""
    _, cols, period, stride = rows_layout
    index = (np.arange(period)[:, None] * cols + np.arange(cols)[None, :]) // stride
    return param.reshape(-1)[index]


def _param_sums(values, param, rows_layout):
    """Sum of `values` (rows, cols) per affine entry, in param's shape."""
    rows, cols, period, stride = rows_layout
    per_slot = values.reshape(rows // period, period, cols).sum(axis=0)
    index = (np.arange(period)[:, None] * cols + np.arange(cols)[None, :]) // stride
    return np.bincount(index.reshape(-1), per_slot.reshape(-1), minlength=param.size).reshape(param.shape)


def _rows(ctx, x, scale):
    """(layout, X as (rows, cols) in the accumulation type, that type)."""
    rows_layout = layout(ctx.op_type.removesuffix("Grad"), x.shape, ctx.attrs, scale.size)
    rows, cols, _, _ = rows_layout
    acc = accumulation_dtype(x.dtype)
    return rows_layout, x.reshape(rows, cols).astype(acc, copy=False), acc


def normalization(ctx):
    x, scale, bias = (list(ctx.inputs) + [None])[:3]
    rows_layout, x2, acc = _rows(ctx, x, scale)
    rows, cols, period, _ = rows_layout
    if x.size == 0:
        mean = inv_std = np.zeros(rows, acc)
        y = np.empty_like(x)
    else:
        mean = x2.mean(axis=1)
        centered = x2 - mean[:, None]
        inv_std = 1.0 / np.sqrt(np.mean(centered * centered, axis=1) + acc.type(ctx.attrs["epsilon"]))
        normalized = (centered * inv_std[:, None]).reshape(rows // period, period, cols)
        y = normalized * _affine_table(scale.astype(acc), rows_layout)
        if bias is not None:
            y += _affine_table(bias.astype(acc), rows_layout)
        y = y.astype(x.dtype).reshape(x.shape)
    stats = stats_shape(ctx.op_type, x.shape, ctx.attrs)
    out = dict(zip(_OUTPUTS[ctx.op_type], (y, *(s.astype(x.dtype).reshape(stats) for s in (mean, inv_std)))))
    return {k: v for k, v in out.items() if ctx.wants(k)}


def normalization_grad(ctx):
    dy, x, scale, mean, inv_std = ctx.inputs
    rows_layout, x2, acc = _rows(ctx, x, scale)
    rows, cols, period, _ = rows_layout
    dy2 = dy.reshape(rows, cols).astype(acc, copy=False)
    normalized = (x2 - mean.reshape(rows, 1)) * inv_std.reshape(rows, 1)
    out = {}
    if ctx.wants("dX"):
        affine = _affine_table(scale.astype(acc), rows_layout)
        g = (dy2.reshape(rows // period, period, cols) * affine).reshape(rows, cols)
        if cols:
            dx = inv_std.reshape(rows, 1) * (g - g.mean(axis=1, keepdims=True)
                                             - normalized * (g * normalized).mean(axis=1, keepdims=True))
        else:
            dx = g
        out["dX"] = dx.astype(x.dtype).reshape(x.shape)
    if ctx.wants("dscale"):
        out["dscale"] = _param_sums(dy2 * normalized, scale, rows_layout).astype(x.dtype)
    if ctx.wants("dbias"):
        out["dbias"] = _param_sums(dy2, scale, rows_layout).astype(x.dtype)
    return out


_OUTPUTS = {"LayerNormalization": ("Y", "Mean", "InvStdDev"), "InstanceNormalization": ("output", "mean", "inv_std_dev"),
            "GroupNormalization": ("Y", "mean", "inv_std_dev")}

for _domain, _since, _op in (("", 17, "LayerNormalization"), (MS_DOMAIN, 1, "LayerNormalization"),
                             ("", 6, "InstanceNormalization"), ("", 18, "GroupNormalization")):
    register_kernel(_op, domain=_domain, since=_since)(normalization)
for _op in ("LayerNormalizationGrad", "InstanceNormalizationGrad", "GroupNormalizationGrad"):
    register_kernel(_op, domain=MS_DOMAIN)(normalization_grad)
