"""Shape arithmetic shared by inference functions and kernels; dims are ints or symbolic names
(str)."""
import math


def dims_differ(a, b):
    """Whether two dims are known to differ: both ints and unequal (a symbolic dim may be anything)."""
    return isinstance(a, int) and isinstance(b, int) and a != b


def shapes_differ(a, b):
    """Whether two shapes are known to differ: other ranks, or a pair of dims that differ; an
    unknown shape (None) differs from nothing."""
    if a is None or b is None:
        return False
    return len(a) != len(b) or any(dims_differ(x, y) for x, y in zip(a, b))


def numel(dims):
    """The product of concrete dims (1 for none), as a Python int."""
    return math.prod(int(d) for d in dims)


def split_planes(shape):
    """(N * C, spatial size) of an (N, C, *spatial) shape: the (planes, plane) view of pooling
    and normalisation kernels."""
    return int(shape[0]) * int(shape[1]), numel(shape[2:])


def broadcast_shapes(ctx, shapes):
    """NumPy broadcasting of several shapes; fails naming the op when they do not broadcast."""
    if any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes)
    result = []
    for axis in range(rank):
        dims = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        concrete = {d for d in dims if isinstance(d, int) and d != 1}
        symbolic = [d for d in dims if not isinstance(d, int)]
        if len(concrete) > 1:
            ctx.fail(f"input shapes {[tuple(s) for s in shapes]} do not broadcast (axis {axis - rank})")
        if concrete:
            result.append(concrete.pop())
        elif symbolic:
            result.append(symbolic[0])
        else:
            result.append(1)
    return tuple(result)


def normalize_axis(ctx, axis, rank, attr="axis", allow_end=False):
    """An axis in [-rank, rank) as a non-negative int (axis + rank when negative), as ONNX
    defines it.  allow_end also admits `rank` itself (Flatten's axis, in [-rank, rank])."""
    upper = rank + 1 if allow_end else rank
    if not -rank <= axis < upper:
        ctx.attr_fail(attr, f"is out of range for an input of rank {rank}: expected "
                            f"[{-rank}, {upper - 1}]")
    return axis + rank if axis < 0 else axis


def kernel_axis(fail, axis, rank):
    """normalize_axis for a kernel, whose context has only `fail`: attribute 'axis' in
    [-rank, rank) as a non-negative int."""
    if not -rank <= axis < rank:
        fail(f"attribute 'axis'={axis} is out of range for an input of rank {rank}: expected [{-rank}, {rank - 1}]")
    return axis + rank if axis < 0 else axis

def product(dims):
    """Product of dims; a symbolic name when any dim is symbolic (kept only if alone)."""
    result = 1
    for d in dims:
        if not isinstance(d, int):
            return d if len(dims) == 1 else None
        result *= d
    return result
