"""CPU kernels of the pooling family (minitrain._ext.pool).

Python settles the geometry (ops/pool_geometry.py), pads 1-D and 2-D pooling to 3-D with
untouched leading axes, picks a kernel and builds its tables; the Cython kernels loop over
N * C planes in parallel.  All of that depends only on the shapes, dtype and attributes, so it
is computed once per signature and kept in a small cache (`_plan`): a training step calls the
same pooling nodes with the same shapes every time.

Kernels, most specific first:
  MaxPool / MaxPoolGrad    kernel = stride = 2 along W (1 or 2 along H), no padding or dilation,
                           row-major indices: max_pool_k2 / max_pool_grad_k2 (the gradient from
                           8 windows per row), also where a last window is cut by the input's
                           end (ceil_mode, padding after); else the general window loop /
                           scatter-add.
  AveragePool(Grad)        stride 1 along H and W, output as wide as input, D untouched:
                           window_sums (ext/avg_pool_flat.pyx, two flat passes per plane).
  AveragePool              along W stride 1, or dilation 1: avg_pool_rows (row sums over the
                           D and H taps, then along W); else the general window loop.
  AveragePoolGrad          along W stride 1, or kernel = stride without padding or dilation:
                           avg_pool_grad_rows; else the separable scatter passes.
"""

import numpy as np

from ..._ext import avg_pool_flat as _avg_flat
from ..._ext import pool as _pool
from ...errors import ShapeError
from ...ops.pool import check_global_grad_shape
from ...ops.pool_geometry import DimGeometry, dx_shape, pool_geometry
from ...ops.schema import MS_DOMAIN, describe_op
from ...ops.shape_utils import split_planes
from ...registry import register_kernel
from ...tensor_limit import check_tensor_bytes, max_tensor_bytes
from ...threads import kernel_threads
from ..plan_cache import cached_plan as _plan

_UNIT = DimGeometry(size=1, out=1, kernel=1, stride=1, dilation=1, pad_begin=0, pad_end=0)
_TAPS, _WINDOWS, _PAIRS, _SPREAD = 0, 1, 2, 1     # the W modes of ext/pool.pyx
_FLAT_CHUNK = 1024      # elements of window_sums' column tables (whole rows, at least one)


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


def _axis_pairs(g, table):
    """(o, x): every tap of every window along one axis that lands inside the input, as the
    output position o and input coordinate x, in window then tap order."""
    counts = table[2] - table[1]
    o = np.repeat(np.arange(g.out, dtype=np.intp), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    t = np.arange(o.size, dtype=np.intp) - first + np.repeat(table[1], counts)
    return o, table[0][o] + t * g.dilation


def _row_table(dims, tables, by_output):
    """CSR table of the (D, H) rows each row sums: per output row od * OH + oh, the input rows
    d * H + h its window covers (by_output), or per input row the output rows whose windows
    cover it; ordered by D tap, then H tap."""
    gd, gh = dims[0], dims[1]
    od, d = _axis_pairs(gd, tables[0])
    oh, h = _axis_pairs(gh, tables[1])
    out_rows = (od[:, None] * gh.out + oh[None, :]).ravel()
    in_rows = (d[:, None] * gh.size + h[None, :]).ravel()
    keys, values, n = (out_rows, in_rows, gd.out * gh.out) if by_output else (in_rows, out_rows, gd.size * gh.size)
    order = np.argsort(keys, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.intp)
    ptr[1:] = np.cumsum(np.bincount(keys, minlength=n))
    return ptr, np.ascontiguousarray(values[order], dtype=np.intp)


def _depth_planes(dims):
    """How many (H, W) planes a plane of an untouched D axis holds: a kernel that pools (H, W)
    planes (max_pool_k2, window_sums) takes each D slice as a plane of its own."""
    return dims[0].size


def _k2_rows(dims, cut=False):
    """kh (1 or 2) when MaxPool can take max_pool_k2: kernel = stride = 2 along W, kernel =
    stride = kh along H, D untouched, no padding before or dilation, every window inside the
    input (with `cut`, starting inside it: the last may be cut by its end); else 0."""
    def plain(g, k):
        return (g.kernel == k and g.stride == k and g.dilation == 1 and g.pad_begin == 0
                and ((g.out - 1) * k < g.size if cut else g.out * k <= g.size))
    gd, gh, gw = dims
    if not (gd.trivial and plain(gw, 2)):
        return 0
    return 1 if plain(gh, 1) else 2 if plain(gh, 2) else 0


def _geometry(ctx, x_shape, what="input 'X'"):
    return pool_geometry(ctx.attrs, x_shape[2:], ctx.fail, what)


# --------------------------------------------------------------------------- MaxPool
def _max_pool_plan(ctx, shape, with_indices):
    """(Y shape, kh of max_pool_k2 or 0, the kernel's arguments, (H, W) planes per plane)."""
    dims = _as_3d(_geometry(ctx, shape))
    col_major = ctx.attrs.get("storage_order", 0) == 1
    out_shape = tuple(shape[:2]) + tuple(g.out for g in dims[3 - (len(shape) - 2):])
    kh = 0 if (col_major and with_indices) else _k2_rows(dims, cut=True)
    if kh:      # indices stay offsets into the whole tensor: D slices are consecutive planes
        return out_shape, kh, (dims[2].size, kh, dims[1].out), _depth_planes(dims)
    args = (tuple(g.size for g in dims), tuple(g.out for g in dims), tuple(g.dilation for g in dims),
            *[_window_table(g) for g in dims], col_major)
    return out_shape, kh, args, 1


def max_pool(ctx):
    x = ctx.inputs[0]
    want_indices = ctx.wants("Indices")
    out_shape, k2, args, depth = _plan(ctx, "MaxPool", (x.shape, want_indices),
                                       lambda: _max_pool_plan(ctx, x.shape, want_indices))
    planes, size = split_planes(x.shape)
    planes, size = planes * depth, size // depth
    y = np.empty(out_shape, dtype=x.dtype)
    indices = np.empty(out_shape, dtype=np.int64) if want_indices else None
    if planes and size:
        out_size = y.size // planes
        flat = (x.reshape(planes, size), y.reshape(planes, out_size),
                indices.reshape(planes, out_size) if want_indices else None)
        if k2:
            _pool.max_pool_k2(*flat, *args, kernel_threads())
        else:
            _pool.max_pool(*flat, *args, kernel_threads())
    result = {"Y": y}
    if want_indices:
        result["Indices"] = indices
    return result


def _max_pool_grad_plan(ctx, dy):
    shape = dx_shape(ctx, dy)
    dims = _as_3d(_geometry(ctx, shape, "dX"))
    col_major = ctx.attrs.get("storage_order", 0) == 1
    # rows under 8 windows: zero-filling the plane and scattering dY beats the per-row loop; a
    # D axis of several slices takes the scatter too, which accepts any index inside the plane
    kh = 0 if col_major or dims[2].out < 8 or dims[0].size > 1 else _k2_rows(dims, cut=True)
    return shape, kh, col_major, tuple(g.size for g in dims), dims[1].out


def max_pool_grad(ctx):
    dy, indices = ctx.inputs[0], ctx.inputs[1]
    shape, k2, col_major, in3, out_rows = _plan(ctx, "MaxPoolGrad", (dy.shape, ctx.output_shapes.get("dX")),
                                                lambda: _max_pool_grad_plan(ctx, dy))
    planes, size = split_planes(shape)
    dx = np.empty(shape, dtype=dy.dtype)
    if planes == 0 or size == 0:
        return {"dX": dx}
    out_size = dy.size // planes
    flat_indices = indices.reshape(planes, out_size)
    if k2:
        first_bad = _pool.max_pool_grad_k2(dy.reshape(planes, out_size), flat_indices, dx.reshape(planes, size),
                                           in3[1], in3[2], k2, out_rows, kernel_threads())
    else:
        first_bad = _pool.max_pool_grad(dy.reshape(planes, out_size), flat_indices, dx.reshape(planes, size),
                                        col_major, in3, kernel_threads())
    if first_bad >= 0:
        p = first_bad // out_size
        where = tuple(int(i) for i in np.unravel_index(first_bad, dy.shape))
        ctx.fail(f"input 'Indices' holds {int(flat_indices.reshape(-1)[first_bad])} at {where}, outside "
                 f"[{p * size}, {(p + 1) * size}): the positions of its (n, c) plane in dX {shape}",
                 ShapeError)
    return {"dX": dx}


# --------------------------------------------------------------------------- AveragePool
def _average_pool_plan(ctx, shape, dtype):
    """(Y shape, kernel, its arguments before num_threads, (H, W) planes per plane)."""
    dims = _as_3d(_geometry(ctx, shape))
    out_shape = tuple(shape[:2]) + tuple(g.out for g in dims[3 - (len(shape) - 2):])
    tables = [_window_table(g) for g in dims]
    inv = [_reciprocal_counts(g, t, ctx.attrs.get("count_include_pad", 0)) for g, t in zip(dims, tables)]
    gw = dims[2]
    if _flat(dims):
        return out_shape, _avg_flat.window_sums, _flat_tables(dims, inv, dtype, gradient=False), _depth_planes(dims)
    if gw.stride == 1 and (gw.out >= 16 or gw.dilation > 1):
        # shifted sums over a row buffer with pad_begin zeros before the row and enough after
        ext = max(gw.pad_begin + gw.size, gw.out + (gw.kernel - 1) * gw.dilation)
        wtab = (np.arange(gw.kernel, dtype=np.intp) * gw.dilation)[None, :]
        mode, lead = _TAPS, gw.pad_begin
    elif gw.dilation == 1:
        ext, lead = gw.size, 0
        full_pairs = gw.kernel == gw.stride == 2 and gw.pad_begin == 0 and 2 * gw.out <= gw.size
        mode = _PAIRS if full_pairs else _WINDOWS
        start = tables[2][0] + tables[2][1]
        wtab = np.ascontiguousarray(np.stack([start, start - tables[2][1] + tables[2][2]]), dtype=np.intp)
    else:
        return out_shape, _pool.avg_pool, (tuple(g.size for g in dims), tuple(g.out for g in dims),
                                           tuple(g.dilation for g in dims), *tables, *inv), 1
    ptr, rows = _row_table(dims, tables, by_output=True)
    return out_shape, _pool.avg_pool_rows, (_scale_plane(dims, inv, dtype), ptr, rows, gw.size, gw.out, mode, lead,
                                            ext, wtab), 1


def average_pool(ctx):
    x = ctx.inputs[0]
    out_shape, kernel, args, depth = _plan(ctx, "AveragePool", (x.shape, x.dtype.char),
                                           lambda: _average_pool_plan(ctx, x.shape, x.dtype))
    planes, size = split_planes(x.shape)
    planes, size = planes * depth, size // depth
    y = np.empty(out_shape, dtype=x.dtype)
    if planes and size:
        kernel(x.reshape(planes, size), y.reshape(planes, y.size // planes), *args, kernel_threads())
    return {"Y": y}


def _flat_tables(dims, inv, dtype, gradient):
    """window_sums' arguments (ext/avg_pool_flat.pyx) for AveragePool (or its gradient) with D
    untouched, stride 1 along H and W, and output and input equally wide: runs of output rows
    sharing their valid H taps and weights, the taps as flat offsets into the source, and per
    W tap a table of column weights over a chunk of whole rows (0 where it leaves the row)."""
    gh, gw = dims[1], dims[2]
    uniform = all(np.all(v == v[0]) for v in inv)      # every window counts the same
    rh = np.ones(gh.out) if uniform else inv[1]
    sign = -1 if gradient else 1
    offsets = [sign * (a * gh.dilation - gh.pad_begin) for a in range(gh.kernel)]
    rows, source_rows = (gh.size, gh.out) if gradient else (gh.out, gh.size)
    runs, taps = [], []
    for i in range(rows):
        valid = tuple((o, rh[i + o] if gradient else rh[i]) for o in offsets if 0 <= i + o < source_rows)
        if runs and taps[-1] == valid:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
            taps.append(valid)
    ptr = np.cumsum([0] + [len(t) for t in taps]).astype(np.intp)
    shifts = np.array([o * gw.size for t in taps for o, _ in t], dtype=np.intp)
    weights = np.array([] if uniform else [w for t in taps for _, w in t], dtype=dtype)
    cols = np.array([sign * (b * gw.dilation - gw.pad_begin) for b in range(gw.kernel)], dtype=np.intp)
    chunk_rows = max(1, min(rows, -(-_FLAT_CHUNK // gw.size)))
    j = np.arange(chunk_rows * gw.size)[None, :] % gw.size
    q = j + cols[:, None]                               # the column each tap reads
    cw = 1.0 if uniform else inv[2][np.clip(q, 0, gw.size - 1)] if gradient else inv[2][j]
    tables = np.where((q >= 0) & (q < gw.size), cw, 0.0).astype(dtype)
    post = float(inv[0][0] * inv[1][0] * inv[2][0]) if uniform else 1.0
    return gw.size, np.array(runs, dtype=np.intp).reshape(-1, 2), ptr, shifts, weights, tables, cols, post


def _flat(dims):
    """Whether window_sums does this pooling: D untouched, stride 1 along H and W, output and
    input equally wide."""
    gd, gh, gw = dims
    return gd.trivial and gh.stride == 1 and gw.stride == 1 and gw.out == gw.size


def _average_pool_grad_plan(ctx, dy):
    """(dX shape, kernel, its arguments before num_threads, (H, W) planes per plane)."""
    shape = dx_shape(ctx, dy)
    dims = _as_3d(_geometry(ctx, shape, "dX"))
    tables = [_window_table(g) for g in dims]
    inv = [_reciprocal_counts(g, t, ctx.attrs.get("count_include_pad", 0)) for g, t in zip(dims, tables)]
    gw = dims[2]
    if _flat(dims):
        return shape, _avg_flat.window_sums, _flat_tables(dims, inv, dy.dtype, gradient=True), _depth_planes(dims)
    if gw.stride == 1:
        # dx[w] gathers the scaled dY at w + pad_begin - t * dilation from a zero-margined row
        lead = max(0, (gw.kernel - 1) * gw.dilation - gw.pad_begin)
        ext = lead + max(gw.out, gw.size + gw.pad_begin)
        shift = gw.pad_begin - np.arange(gw.kernel, dtype=np.intp) * gw.dilation
        mode = _TAPS
    elif gw.kernel == gw.stride and gw.dilation == 1 and gw.pad_begin == 0:
        lead, ext, shift, mode = 0, gw.out, np.zeros(gw.kernel, dtype=np.intp), _SPREAD
    else:
        geometry = tuple((g.size, g.out, g.kernel, g.stride, g.dilation, g.pad_begin) for g in dims)
        return shape, _pool.avg_pool_grad, (geometry, tuple(g.trivial for g in dims),
                                            _scale_plane(dims, inv, dy.dtype), *[_tap_ranges(g) for g in dims]), 1
    ptr, rows = _row_table(dims, tables, by_output=False)
    row_weights = (inv[0][:, None] * inv[1][None, :]).reshape(-1)[rows].astype(dy.dtype)
    # every window counting the same (count_include_pad, or no window reaching the padding):
    # one product after the taps instead of one per dY row and column
    uniform = mode == _TAPS and all(np.all(v == v[0]) for v in inv)
    post = np.full(gw.size if uniform else 0, inv[0][0] * inv[1][0] * inv[2][0], dtype=dy.dtype)
    return shape, _pool.avg_pool_grad_rows, (row_weights, inv[2].astype(dy.dtype), ptr, rows, mode, lead, ext,
                                             shift, gw.kernel, post), 1


def average_pool_grad(ctx):
    dy = ctx.inputs[0]
    shape, kernel, args, depth = _plan(ctx, "AveragePoolGrad", (dy.shape, dy.dtype.char, ctx.output_shapes.get("dX")),
                                       lambda: _average_pool_grad_plan(ctx, dy))
    planes, size = split_planes(shape)
    planes, size = planes * depth, size // depth
    dx = np.empty(shape, dtype=dy.dtype)
    if planes and size:
        kernel(dy.reshape(planes, dy.size // planes), dx.reshape(planes, size), *args, kernel_threads())
    return {"dX": dx}


# --------------------------------------------------------------------------- global pooling
def _global(is_max):
    def kernel(ctx):
        x = ctx.inputs[0]
        planes = x.shape[0] * x.shape[1]
        y = np.empty(x.shape[:2] + (1,) * (x.ndim - 2), dtype=x.dtype)
        if planes:
            _pool.global_pool(x.reshape(planes, x.size // planes), y.reshape(planes), is_max, kernel_threads())
        return {"Y": y}
    return kernel


def _global_grad_plan(ctx, dy, shape):
    """(planes, plane size) of dX, its shape checked against dY's and the tensor limit."""
    check_global_grad_shape(ctx, dy.shape, shape)
    check_tensor_bytes(describe_op(ctx.op_type, ctx.node_name), "dX", shape, dy.dtype, ctx.attrs)
    return split_planes(shape)


def global_average_pool_grad(ctx):
    dy, shape = ctx.inputs[0], tuple(ctx.inputs[1].tolist())
    planes, size = _plan(ctx, "GlobalAveragePoolGrad", (dy.shape, shape, dy.dtype.char, max_tensor_bytes()),
                         lambda: _global_grad_plan(ctx, dy, shape))
    dx = np.empty(shape, dtype=dy.dtype)
    if planes and size:
        _pool.global_avg_pool_grad(dy.reshape(planes), dx.reshape(planes, size), kernel_threads())
    return {"dX": dx}


def global_max_pool_grad(ctx):
    dy, x = ctx.inputs[0], ctx.inputs[1]
    planes, size = split_planes(x.shape)
    dx = np.empty_like(x)
    if planes and size:
        _pool.global_max_pool_grad(dy.reshape(planes), x.reshape(planes, size), dx.reshape(planes, size),
                                   kernel_threads())
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
