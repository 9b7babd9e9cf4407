"""CUDA kernels of the pooling family (cuda/pool.cu), registered as the CPU's are
(providers/cpu/pool.py): the same ops, versions, attributes, ranks and errors.

Python settles the geometry with ops/pool_geometry.py (dX's shape of the gradients with its
`dx_shape`), pads 1-D and 2-D pooling to 3-D with leading unit axes and passes it to the
kernels as one PoolGeom struct; that depends only on the shapes and attributes, so it is kept
per signature in a small cache, as the CPU side does.

MaxPool and MaxPoolGrad take their `_tiles` kernels when the windows tile the input (kernel =
stride, no padding or dilation: k = s = 2 among them): MaxPool with less index arithmetic, and
MaxPoolGrad with one thread per window writing its whole box, no atomics.  Other geometries
scatter-add dY into a zeroed dX with atomics.  An Indices value
outside its (n, c) plane is skipped rather than reported: the CPU kernel raises a ShapeError
for it, which here would cost a host synchronisation per call.
"""
import numpy as np

from ...ops.pool import check_global_grad_shape
from ...ops.pool_geometry import DimGeometry, dx_shape, pool_geometry
from ...ops.schema import MS_DOMAIN, describe_op
from ...ops.shape_utils import split_planes
from ...registry import register_kernel
from ...tensor_limit import check_tensor_bytes
from ..plan_cache import cached_plan as _plan
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .launch import MAX_GRID_X

GEOM = "i" * 21     # struct PoolGeom: size, out, kernel, stride, dilation, pad, pad_end per axis
_UNIT = DimGeometry(size=1, out=1, kernel=1, stride=1, dilation=1, pad_begin=0, pad_end=0)

_max_pool = Kernel("pool", "max_pool", "PPPq" + GEOM + "i")
_max_pool_tiles = {rank: Kernel("pool", f"max_pool_tiles_r{rank}", "PPPq" + GEOM + "i") for rank in (1, 2, 3)}
_max_pool_grad_tiles = Kernel("pool", "max_pool_grad_tiles", "PPPPq" + GEOM + "i")
_max_pool_grad_scatter = Kernel("pool", "max_pool_grad_scatter", "PPPq" + GEOM + "i")
_avg_pool = Kernel("pool", "avg_pool", "PPqT" + GEOM + "i")
_avg_pool_grad = Kernel("pool", "avg_pool_grad", "PPqT" + GEOM + "i")
_global_pool = Kernel("pool", "global_pool", "PPqqi")
_global_pool_warps = Kernel("pool", "global_pool_warps", "PPqqi")
WARP_PLANE = 256        # planes up to this size are reduced a warp each, several to a block
_global_avg_pool_grad = Kernel("pool", "global_avg_pool_grad", "PPqq")
_global_max_pool_grad = Kernel("pool", "global_max_pool_grad", "PPPqq")

def pool_dims(ctx, shape, what="input 'X'", attrs=None):
    """The per-axis geometry of pooling `shape` (by ctx's attributes, or `attrs`), padded to
    three axes with unit ones."""
    dims = pool_geometry(ctx.attrs if attrs is None else attrs, shape[2:], ctx.fail, what)
    return (_UNIT,) * (3 - len(dims)) + tuple(dims)


def geom_fields(dims):
    """The PoolGeom struct's fields, in its order."""
    fields = ("size", "out", "kernel", "stride", "dilation", "pad_begin", "pad_end")
    return tuple(getattr(g, f) for f in fields for g in dims)


def _col_major(ctx):
    return int(ctx.attrs.get("storage_order", 0) == 1)


# --------------------------------------------------------------------------- MaxPool
def max_pool(ctx):
    x = ctx.inputs[0]

    def build():
        dims = pool_dims(ctx, x.shape)
        kernel = _max_pool_tiles[x.ndim - 2] if tiles(dims) else _max_pool
        return tuple(x.shape[:2]) + tuple(g.out for g in dims[5 - x.ndim:]), geom_fields(dims), kernel
    out_shape, geom, kernel = _plan(ctx, "MaxPool", x.shape, build)
    want_indices = ctx.wants("Indices")
    y = ctx.provider.empty(out_shape, x.dtype)
    indices = ctx.provider.empty(out_shape, np.int64) if want_indices else None
    if y.size:
        kernel.launch_elements(ctx.provider, x.dtype, y.size, x, y, 0 if indices is None else indices, y.size,
                               *geom, _col_major(ctx))
    result = {"Y": y}
    if want_indices:
        result["Indices"] = indices
    return result


def tiles(dims):
    """Whether the windows tile the input: kernel = stride, no padding or dilation on every axis."""
    return all(g.kernel == g.stride and g.dilation == 1 and g.pad_begin == 0 and g.out * g.kernel <= g.size
               for g in dims)


def _tile_scratch(provider):
    """max_pool_grad_tiles' two counters on `provider` (zero between launches)."""
    def make():
        counters = provider.persistent_empty((2,), np.uint32)
        provider.fill_zero(counters)
        return counters
    return provider.cache.get("max_pool_grad_tiles counters", make)


def max_pool_grad(ctx):
    dy, indices = ctx.inputs[0], ctx.inputs[1]

    def build():
        shape = dx_shape(ctx, dy)
        dims = pool_dims(ctx, shape, "dX")
        covered = all(g.out * g.kernel == g.size for g in dims)
        return shape, geom_fields(dims), tiles(dims), covered
    shape, geom, tiled, covered = _plan(ctx, "MaxPoolGrad", (dy.shape, ctx.output_shapes.get("dX")), build)
    provider = ctx.provider
    dx = provider.empty(shape, dy.dtype)
    if not (tiled and covered):
        provider.fill_zero(dx)
    if dy.size and dx.size:
        if tiled:
            _max_pool_grad_tiles.launch_elements(provider, dy.dtype, dy.size, dy, indices, dx,
                                                 _tile_scratch(provider), dy.size, *geom, _col_major(ctx))
        else:
            _max_pool_grad_scatter.launch_elements(provider, dy.dtype, dy.size, dy, indices, dx, dy.size,
                                                   *geom, _col_major(ctx))
    return {"dX": dx}


# --------------------------------------------------------------------------- AveragePool
def _uniform_weight(dims, include_pad):
    """1 / (the count of every window) when all windows count the same taps, else 0."""
    counts = 1
    for g in dims:
        per_window = set()
        for o in range(g.out):
            t0, t1 = g.valid_taps(o)
            per_window.add(g.padded_taps(o) if include_pad else t1 - t0)
        if len(per_window) != 1:
            return 0.0
        counts *= per_window.pop()
    return 1.0 / counts


def _average_geometry(ctx, shape, what):
    dims = pool_dims(ctx, shape, what)
    include_pad = int(ctx.attrs.get("count_include_pad", 0) == 1)
    return dims, geom_fields(dims), include_pad, _uniform_weight(dims, include_pad)


def _whole_plane(dims):
    """Whether the one window covers each plane exactly (a global average, whose one-block-
    per-plane kernels are much faster than the windowed ones on long planes)."""
    return all(g.out == 1 and g.kernel == g.size and g.dilation == 1 and g.pad_begin == g.pad_end == 0
               for g in dims)


def average_pool(ctx):
    x = ctx.inputs[0]

    def build():
        dims, geom, include_pad, uniform = _average_geometry(ctx, x.shape, "input 'X'")
        out_shape = tuple(x.shape[:2]) + tuple(g.out for g in dims[5 - x.ndim:])
        return out_shape, geom, include_pad, uniform, _whole_plane(dims)
    out_shape, geom, include_pad, uniform, whole = _plan(ctx, "AveragePool", x.shape, build)
    y = ctx.provider.empty(out_shape, x.dtype)
    if not x.size:
        return {"Y": y}
    if whole:
        planes, size = split_planes(x.shape)
        global_pool(ctx, x, y, planes, size, False)
    else:
        _avg_pool.launch_elements(ctx.provider, x.dtype, y.size, x, y, y.size, uniform, *geom, include_pad)
    return {"Y": y}


def average_pool_grad(ctx):
    dy = ctx.inputs[0]

    def build():
        shape = dx_shape(ctx, dy)
        dims, geom, include_pad, uniform = _average_geometry(ctx, shape, "dX")
        return shape, geom, include_pad, uniform, _whole_plane(dims)
    shape, geom, include_pad, uniform, whole = _plan(ctx, "AveragePoolGrad", (dy.shape, ctx.output_shapes.get("dX")),
                                                     build)
    dx = ctx.provider.empty(shape, dy.dtype)
    if not (dy.size and dx.size):
        return {"dX": dx}
    if whole:
        _global_avg_pool_grad.launch_elements(ctx.provider, dy.dtype, dx.size, dy, dx, split_planes(shape)[1], dx.size)
    else:
        _avg_pool_grad.launch_elements(ctx.provider, dy.dtype, dx.size, dy, dx, dx.size, uniform, *geom,
                                       include_pad)
    return {"dX": dx}


# --------------------------------------------------------------------------- global pooling
def global_pool(ctx, x, y, planes, size, is_max):
    """y[p] = the mean or the maximum of plane p of x: a warp per plane for short planes, a block
    per plane for long ones."""
    if size <= WARP_PLANE:
        per_block = 8
        _global_pool_warps.launch(ctx.provider, x.dtype, (min(-(-planes // per_block), MAX_GRID_X), 1, 1),
                                  (32 * per_block, 1, 1), x, y, planes, size, int(is_max))
    else:
        _global_pool.launch(ctx.provider, x.dtype, *_plane_launch(planes, size), x, y, planes, size, int(is_max))


def _plane_launch(planes, size):
    """(grid, block) of the one-block-per-plane kernels: a block as wide as the plane needs."""
    threads = 32 if size <= 256 else 128 if size <= 4096 else 256
    return (min(planes, MAX_GRID_X), 1, 1), (threads, 1, 1)


def _global(is_max):
    def kernel(ctx):
        x = ctx.inputs[0]
        planes, size = split_planes(x.shape)
        y = ctx.provider.empty(tuple(x.shape[:2]) + (1,) * (x.ndim - 2), x.dtype)
        if planes:
            global_pool(ctx, x, y, planes, size, is_max)
        return {"Y": y}
    return kernel


def global_average_pool_grad(ctx):
    dy, shape = ctx.inputs[0], tuple(int(d) for d in ctx.inputs[1])
    check_global_grad_shape(ctx, dy.shape, shape)
    check_tensor_bytes(describe_op(ctx.op_type, ctx.node_name), "dX", shape, dy.dtype, ctx.attrs)
    planes, size = split_planes(shape)
    dx = ctx.provider.empty(shape, dy.dtype)
    if planes and size:
        _global_avg_pool_grad.launch_elements(ctx.provider, dy.dtype, dx.size, dy, dx, size, dx.size)
    return {"dX": dx}


def global_max_pool_grad(ctx):
    dy, x = ctx.inputs[0], ctx.inputs[1]
    planes, size = split_planes(x.shape)
    dx = ctx.provider.empty(x.shape, x.dtype)
    if planes and size:
        _global_max_pool_grad.launch(ctx.provider, x.dtype, *_plane_launch(planes, size), dy, x, dx,
                                     planes, size)
    return {"dX": dx}


def _register(op, ranges, fn, **kwargs):
    for since, end in ranges:
        register_kernel(op, since=since, end=end, provider="cuda", dtypes=CUDA_FLOAT_TYPES, **kwargs)(fn)


# the CPU's version ranges (the attributes each version accepts are the schema's business)
_register("MaxPool", ((1, 7), (8, 9), (10, 10), (11, 11), (12, None)), max_pool)
_register("AveragePool", ((1, 6), (7, 9), (10, 10), (11, 18), (19, None)), average_pool)
_register("MaxPoolGrad", ((9, None),), max_pool_grad)
_register("AveragePoolGrad", ((9, None),), average_pool_grad)
_register("GlobalAveragePool", ((1, None),), _global(False))
_register("GlobalMaxPool", ((1, None),), _global(True))
_register("GlobalAveragePoolGrad", ((1, None),), global_average_pool_grad, domain=MS_DOMAIN, host_inputs=(1,))
_register("GlobalMaxPoolGrad", ((1, None),), global_max_pool_grad, domain=MS_DOMAIN)
