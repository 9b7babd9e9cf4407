"""CPU kernels of the pooling family (minitrain._ext.pool).

Python settles the geometry (ops/pool_geometry.py), pads 1-D and 2-D pooling to 3-D with
untouched leading axes, and builds the per-axis window tables; the Cython kernels loop over
N * C planes in parallel."""
import numpy as np

from ..._ext import pool as _pool
from ...errors import ShapeError
from ...ops.pool_geometry import DimGeometry, input_sizes_for, pool_geometry
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from ...threads import get_num_threads

_UNIT = DimGeometry(size=1, out=1, kernel=1, stride=1, dilation=1, pad_begin=0, pad_end=0)


def _as_3d(dims):
    return (_UNIT,) * (3 - len(dims)) + tuple(dims)


def _window_table(g):
    """(3, out) int64: start coordinate, first and one-past-last tap inside the input."""
    start = np.arange(g.out, dtype=np.int64) * g.stride - g.pad_begin
    t0 = np.where(start < 0, (-start + g.dilation - 1) // g.dilation, 0)
    last = g.size - 1 - start
    t1 = np.where(last >= 0, np.minimum(g.kernel, last // g.dilation + 1), 0)
    return np.ascontiguousarray(np.stack([start, t0, np.maximum(t0, t1)]))


def _reciprocal_counts(g, table, count_include_pad):
    """1 / (taps of each window that count): inside the padded input, or inside the input."""
    if count_include_pad:
        counts = np.minimum(g.kernel, (g.size + g.pad_end - 1 - table[0]) // g.dilation + 1)
    else:
        counts = table[2] - table[1]
    return 1.0 / counts.astype(np.float64)


def _tap_ranges(g):
    """(kernel, 2) int64: for tap t, the output positions [lo, hi) whose tap t lands inside
    the input (the AveragePoolGrad scatter passes read these instead of dividing)."""
    off = np.arange(g.kernel, dtype=np.int64) * g.dilation - g.pad_begin
    lo = np.where(off < 0, (-off + g.stride - 1) // g.stride, 0)
    last = g.size - 1 - off
    hi = np.where(last >= 0, np.minimum(g.out, last // g.stride + 1), 0)
    return np.ascontiguousarray(np.stack([lo, np.maximum(lo, hi)], axis=1))


def _scale_plane(dims, inv, dtype):
    """Reciprocal window count of every output position (outer product of the per-axis ones)."""
    return np.ascontiguousarray((inv[0][:, None, None] * inv[1][None, :, None] * inv[2][None, None, :])
                                .reshape(-1).astype(dtype))


def _planes(shape):
    return int(shape[0]) * int(shape[1]), int(np.prod(shape[2:], dtype=np.int64))


def _geometry(ctx, x_shape, what="input 'X'"):
    if not 3 <= len(x_shape) <= 5:
        ctx.fail(f"{what} has shape {tuple(x_shape)}; pooling needs (N, C, D1[, D2[, D3]])")
    return pool_geometry(ctx.attrs, x_shape[2:], ctx.fail, what)


def dx_shape(ctx, dy):
    """dX's shape: from ctx.output_shapes when the graph gives it (checked against dY), else
    the smallest input shape that pools to dY's spatial shape."""
    if not 3 <= dy.ndim <= 5:
        ctx.fail(f"input 'dY' has shape {dy.shape}; pooling needs (N, C, D1[, D2[, D3]])")
    given = ctx.output_shapes.get("dX")
    if given is not None:
        given = tuple(int(d) for d in given)
        if len(given) != dy.ndim or given[:2] != dy.shape[:2]:
            ctx.fail(f"output_shapes['dX']={given} does not match dY {dy.shape} (rank, N and C)")
        out = tuple(g.out for g in _geometry(ctx, given, "dX"))
        if out != dy.shape[2:]:
            ctx.fail(f"output_shapes['dX']={given} pools to spatial {out}, but dY has shape {dy.shape}")
        return given
    sizes = input_sizes_for(ctx.attrs, dy.shape[2:], ctx.fail)
    return tuple(dy.shape[:2]) + tuple(s for s, _ in sizes)


def max_pool(ctx):
    x = ctx.inputs[0]
    dims = _as_3d(_geometry(ctx, x.shape))
    out_shape = tuple(x.shape[:2]) + tuple(g.out for g in dims[3 - (x.ndim - 2):])
    planes, size = _planes(x.shape)
    y = np.empty(out_shape, dtype=x.dtype)
    want_indices = ctx.wants("Indices")
    indices = np.empty(out_shape, dtype=np.int64) if want_indices else None
    if planes and size:
        out_size = y.size // planes
        _pool.max_pool(x.reshape(planes, size), y.reshape(planes, out_size),
                       indices.reshape(planes, out_size) if want_indices else None,
                       tuple(g.size for g in dims), tuple(g.out for g in dims),
                       tuple(g.dilation for g in dims), *[_window_table(g) for g in dims],
                       ctx.attrs.get("storage_order", 0) == 1, get_num_threads())
    result = {"Y": y}
    if want_indices:
        result["Indices"] = indices
    return result


def average_pool(ctx):
    x = ctx.inputs[0]
    dims = _as_3d(_geometry(ctx, x.shape))
    out_shape = tuple(x.shape[:2]) + tuple(g.out for g in dims[3 - (x.ndim - 2):])
    planes, size = _planes(x.shape)
    y = np.empty(out_shape, dtype=x.dtype)
    if planes and size:
        tables = [_window_table(g) for g in dims]
        inv = [_reciprocal_counts(g, t, ctx.attrs.get("count_include_pad", 0)) for g, t in zip(dims, tables)]
        _pool.avg_pool(x.reshape(planes, size), y.reshape(planes, y.size // planes),
                       tuple(g.size for g in dims), tuple(g.out for g in dims),
                       tuple(g.dilation for g in dims), *tables, *inv, get_num_threads())
    return {"Y": y}


def max_pool_grad(ctx):
    dy, indices = ctx.inputs[0], ctx.inputs[1]
    if indices.shape != dy.shape:
        ctx.fail(f"input 'Indices' has shape {indices.shape}; it must match dY {dy.shape}")
    shape = dx_shape(ctx, dy)
    dims = _as_3d(_geometry(ctx, shape, "dX"))
    planes, size = _planes(shape)
    dx = np.empty(shape, dtype=dy.dtype)
    if planes == 0 or size == 0:
        return {"dX": dx}
    out_size = dy.size // planes
    bad = np.empty(planes, dtype=np.int64)
    flat_indices = indices.reshape(planes, out_size)
    _pool.max_pool_grad(dy.reshape(planes, out_size), flat_indices, dx.reshape(planes, size),
                        ctx.attrs.get("storage_order", 0) == 1, tuple(g.size for g in dims), bad,
                        get_num_threads())
    wrong = np.flatnonzero(bad >= 0)
    if wrong.size:
        p = int(wrong[0])
        q = int(bad[p])
        where = tuple(int(i) for i in np.unravel_index(p * out_size + q, dy.shape))
        ctx.fail(f"input 'Indices' holds {int(flat_indices[p, q])} at {where}, outside "
                 f"[{p * size}, {(p + 1) * size}): the positions of its (n, c) plane in dX {shape}",
                 ShapeError)
    return {"dX": dx}


def average_pool_grad(ctx):
    dy = ctx.inputs[0]
    shape = dx_shape(ctx, dy)
    dims = _as_3d(_geometry(ctx, shape, "dX"))
    planes, size = _planes(shape)
    dx = np.empty(shape, dtype=dy.dtype)
    if planes == 0 or size == 0:
        return {"dX": dx}
    tables = [_window_table(g) for g in dims]
    inv = [_reciprocal_counts(g, t, ctx.attrs.get("count_include_pad", 0)) for g, t in zip(dims, tables)]
    geometry = tuple((g.size, g.out, g.kernel, g.stride, g.dilation, g.pad_begin) for g in dims)
    flat_dy, flat_dx = dy.reshape(planes, dy.size // planes), dx.reshape(planes, size)
    scale = _scale_plane(dims, inv, dy.dtype)
    trivial = tuple(g.trivial for g in dims)
    if all(g.stride == 1 and g.kernel <= 64 for g in dims):
        # overlapping windows: gathers over zero-margined buffers, one store per element
        _pool.avg_pool_grad_stride1(flat_dy, flat_dx, geometry, trivial, scale, get_num_threads())
    else:
        _pool.avg_pool_grad(flat_dy, flat_dx, geometry, trivial, scale, *[_tap_ranges(g) for g in dims],
                            get_num_threads())
    return {"dX": dx}


def _global(is_max):
    def kernel(ctx):
        x = ctx.inputs[0]
        if not 3 <= x.ndim <= 5:
            ctx.fail(f"input 'X' has shape {x.shape}; pooling needs (N, C, D1[, D2[, D3]])")
        planes, size = _planes(x.shape)
        if size == 0:
            ctx.fail(f"input 'X' {x.shape} has an empty spatial axis")
        y = np.empty(tuple(x.shape[:2]) + (1,) * (x.ndim - 2), dtype=x.dtype)
        if planes:
            _pool.global_pool(x.reshape(planes, size), y.reshape(planes), is_max, get_num_threads())
        return {"Y": y}
    return kernel


def global_average_pool_grad(ctx):
    dy, shape = ctx.inputs[0], tuple(int(d) for d in ctx.inputs[1])
    expected = shape[:2] + (1,) * (len(shape) - 2)
    if not 3 <= len(shape) <= 5 or dy.shape != expected:
        ctx.fail(f"input 'dY' has shape {dy.shape}; global pooling of {shape} gives {expected}")
    planes, size = _planes(shape)
    dx = np.empty(shape, dtype=dy.dtype)
    if planes and size:
        _pool.global_avg_pool_grad(dy.reshape(planes), dx.reshape(planes, size), get_num_threads())
    return {"dX": dx}


def global_max_pool_grad(ctx):
    dy, x = ctx.inputs[0], ctx.inputs[1]
    expected = tuple(x.shape[:2]) + (1,) * (x.ndim - 2)
    if not 3 <= x.ndim <= 5 or dy.shape != expected:
        ctx.fail(f"input 'dY' has shape {dy.shape}; global pooling of {x.shape} gives {expected}")
    planes, size = _planes(x.shape)
    dx = np.empty_like(x)
    if planes and size:
        _pool.global_max_pool_grad(dy.reshape(planes), x.reshape(planes, size), dx.reshape(planes, size),
                                   get_num_threads())
    return {"dX": dx}


# One kernel per range of versions whose semantics differ (the attributes each version
# accepts are the schema's business; the kernel reads what is there).
for _since, _end in ((1, 7), (8, 9), (10, 10), (11, 11), (12, None)):
    register_kernel("MaxPool", since=_since, end=_end)(max_pool)
for _since, _end in ((1, 6), (7, 9), (10, 10), (11, 18), (19, None)):
    register_kernel("AveragePool", since=_since, end=_end)(average_pool)
register_kernel("MaxPoolGrad", since=9)(max_pool_grad)
register_kernel("AveragePoolGrad", since=9)(average_pool_grad)
register_kernel("GlobalAveragePool", since=1)(_global(False))
register_kernel("GlobalMaxPool", since=1)(_global(True))
register_kernel("GlobalAveragePoolGrad", domain=MS_DOMAIN)(global_average_pool_grad)
register_kernel("GlobalMaxPoolGrad", domain=MS_DOMAIN)(global_max_pool_grad)
