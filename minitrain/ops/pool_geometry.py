"""Pooling geometry: ONNX pooling attributes resolved per spatial dimension.

One `DimGeometry` per spatial axis holds the input and output sizes, kernel, stride, dilation
and the begin/end pads in force (auto_pad resolved).  Output sizes follow ONNX:

    NOTSET, floor:  out = (in + pb + pe - ((k - 1) * d + 1)) // s + 1
    NOTSET, ceil:   out = ceil((in + pb + pe - ((k - 1) * d + 1)) / s) + 1, minus one when the
                    last window would start in the end padding (PyTorch and ONNX's reference)
    SAME_UPPER/LOWER: out = ceil(in / s); the total pad (out - 1) * s + (k - 1) * d + 1 - in is
                    split evenly, the odd element at the end (UPPER) or the beginning (LOWER)
    VALID:          no pads, floor mode

Every window must hold at least one element of the input: a kernel larger than the padded
input, or pads so large that a window sees only padding, is a ShapeError.  The helpers raise
through `fail(message, error)` so both inference contexts and kernel contexts can use them.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import OpAttributeError, ShapeError

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclass(frozen=True)
class DimGeometry:
    size: int        # input size along the axis
    out: int         # output size
    kernel: int
    stride: int
    dilation: int
    pad_begin: int
    pad_end: int

    def start(self, o):
        """Input coordinate of the first tap of output position o (may be negative)."""
        return o * self.stride - self.pad_begin

    def valid_taps(self, o):
        """(t0, t1): the taps t in [t0, t1) of window o that land inside the input."""
        start, d = self.start(o), self.dilation
        t0 = 0 if start >= 0 else (-start + d - 1) // d
        last = self.size - 1 - start
        t1 = min(self.kernel, last // d + 1) if last >= 0 else 0
        return t0, max(t0, t1)

    def padded_taps(self, o):
        """Number of taps of window o inside the padded input [-pad_begin, size + pad_end)."""
        start = self.start(o)
        return max(0, min(self.kernel, (self.size + self.pad_end - 1 - start) // self.dilation + 1))

    @property
    def trivial(self):
        """An axis the pooling leaves alone (the padding axes of 1D/2D pooling)."""
        return (self.kernel == 1 and self.stride == 1 and self.dilation == 1 and self.pad_begin == 0
                and self.pad_end == 0 and self.size == self.out)


def _ints(attrs, name, n, default, fail, minimum):
    value = attrs.get(name)
    if value is None:
        return (default,) * n
    value = tuple(int(v) for v in value)
    if len(value) != n:
        fail(f"attribute {name!r}={list(value)} must have {n} values, one per spatial axis",
             OpAttributeError)
    if any(v < minimum for v in value):
        fail(f"attribute {name!r}={list(value)} must hold values >= {minimum}", OpAttributeError)
    return value


def check_pool_attrs(attrs, rank, fail):
    """Validate the attributes that do not depend on the input sizes; returns
    (kernel, strides, dilations, pads or None, auto_pad, ceil_mode) for `rank` spatial axes."""
    kernel = attrs.get("kernel_shape")
    if kernel is None:
        fail("required attribute 'kernel_shape' is missing", OpAttributeError)
    kernel = tuple(int(k) for k in kernel)
    if len(kernel) != rank:
        fail(f"attribute 'kernel_shape'={list(kernel)} has {len(kernel)} values but the input has "
             f"{rank} spatial axes", ShapeError)
    if any(k < 1 for k in kernel):
        fail(f"attribute 'kernel_shape'={list(kernel)} must hold values >= 1", OpAttributeError)
    strides = _ints(attrs, "strides", rank, 1, fail, 1)
    dilations = _ints(attrs, "dilations", rank, 1, fail, 1)
    pads = attrs.get("pads")
    if pads is not None:
        pads = tuple(int(p) for p in pads)
        if len(pads) != 2 * rank:
            fail(f"attribute 'pads'={list(pads)} must have {2 * rank} values (begin..., end...)",
                 OpAttributeError)
        if any(p < 0 for p in pads):
            fail(f"attribute 'pads'={list(pads)} must not be negative", OpAttributeError)
    auto_pad = attrs.get("auto_pad") or "NOTSET"
    if auto_pad not in AUTO_PADS:
        fail(f"attribute 'auto_pad'={auto_pad!r} must be one of {list(AUTO_PADS)}", OpAttributeError)
    if auto_pad != "NOTSET" and pads is not None and any(pads):
        fail(f"attribute 'pads'={list(pads)} cannot be used together with auto_pad={auto_pad!r}",
             OpAttributeError)
    for flag in ("ceil_mode", "count_include_pad", "storage_order"):
        if attrs.get(flag) not in (None, 0, 1):
            fail(f"attribute {flag!r}={attrs[flag]!r} must be 0 or 1", OpAttributeError)
    return kernel, strides, dilations, pads, auto_pad, bool(attrs.get("ceil_mode") or 0)


def _dim(size, k, s, d, pb, pe, auto_pad, ceil_mode):
    """DimGeometry of one axis, without the window checks (used by the shape search too)."""
    extent = (k - 1) * d + 1
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = -(-size // s)
        total = max(0, (out - 1) * s + extent - size)
        small, large = total // 2, total - total // 2
        pb, pe = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
    elif auto_pad == "VALID":
        pb = pe = 0
        out = (size - extent) // s + 1 if size >= extent else 0
    else:
        span = size + pb + pe - extent
        if span < 0:
            out = 0
        elif ceil_mode:
            out = -(-span // s) + 1
            if (out - 1) * s >= size + pb:
                out -= 1
        else:
            out = span // s + 1
    return DimGeometry(size, out, k, s, d, pb, pe)


def pool_geometry(attrs, spatial, fail, what="input 'X'"):
    """Per-axis geometry of pooling `spatial` input sizes with ONNX attributes `attrs`
    (global pooling passes kernel_shape = spatial).  Raises through fail()."""
    rank = len(spatial)
    kernel, strides, dilations, pads, auto_pad, ceil_mode = check_pool_attrs(attrs, rank, fail)
    pads = pads or (0,) * (2 * rank)
    dims = []
    for i, size in enumerate(spatial):
        g = _dim(int(size), kernel[i], strides[i], dilations[i], pads[i], pads[i + rank], auto_pad, ceil_mode)
        extent = (g.kernel - 1) * g.dilation + 1
        if g.out < 1:
            fail(f"kernel {list(kernel)} (dilations {list(dilations)}) is larger than the padded "
                 f"{what} along spatial axis {i}: size {size}, pads {g.pad_begin}+{g.pad_end}, "
                 f"window extent {extent}", ShapeError)
        for o in (0, g.out - 1) if g.dilation == 1 else range(g.out):
            t0, t1 = g.valid_taps(o)
            if t1 <= t0:
                fail(f"window {o} along spatial axis {i} covers only padding (size {size}, kernel "
                     f"{g.kernel}, stride {g.stride}, dilation {g.dilation}, pads "
                     f"{g.pad_begin}+{g.pad_end}); reduce the pads", ShapeError)
        dims.append(g)
    return tuple(dims)


def output_spatial(attrs, spatial, fail, what="input 'X'"):
    return tuple(g.out for g in pool_geometry(attrs, spatial, fail, what))


def dx_shape(ctx, dy):
    """dX's shape for a pooling gradient kernel (ctx, with dY already checked by inference):
    from ctx.output_shapes when the graph gives it (checked against dY), else the smallest
    input shape that pools to dY's spatial shape (a guess where several do; see ops/pool.py)."""
    given = ctx.output_shapes.get("dX")
    if given is not None:
        given = tuple(int(d) for d in given)
        if len(given) != dy.ndim or given[:2] != dy.shape[:2]:
            ctx.fail(f"input 'dY' has shape {dy.shape}, which does not match output_shapes['dX']={given} "
                     "(rank, N and C)")
        out = output_spatial(ctx.attrs, given[2:], ctx.fail, "dX")
        if out != dy.shape[2:]:
            ctx.fail(f"input 'dY' has shape {dy.shape}, but output_shapes['dX']={given} pools to "
                     f"spatial {out}")
        return given
    sizes = input_sizes_for(ctx.attrs, dy.shape[2:], ctx.fail)
    return tuple(dy.shape[:2]) + tuple(s for s, _ in sizes)


def input_sizes_for(attrs, out_spatial, fail):
    """For each axis, (smallest, unique): the smallest input size whose pooled size is the given
    output size, and whether it is the only one (floor mode with stride > 1 is ambiguous: the
    graph has to say, which is why the gradient ops read dX's shape from output_shapes)."""
    rank = len(out_spatial)
    kernel, strides, dilations, pads, auto_pad, ceil_mode = check_pool_attrs(attrs, rank, fail)
    pads = pads or (0,) * (2 * rank)
    result = []
    for i, out in enumerate(out_spatial):
        if out < 1:
            fail(f"pooled size {out} along spatial axis {i} must be at least 1", ShapeError)

        def pooled(size):
            return _dim(size, kernel[i], strides[i], dilations[i], pads[i], pads[i + rank], auto_pad,
                        ceil_mode).out
        lo, hi = 1, max(1, out * strides[i] + (kernel[i] - 1) * dilations[i] + 1)
        while pooled(hi) < out:          # pooled() is non-decreasing in the size
            hi *= 2
        while lo < hi:
            mid = (lo + hi) // 2
            if pooled(mid) >= out:
                hi = mid
            else:
                lo = mid + 1
        if pooled(lo) != out:
            fail(f"no input size pools to {out} along spatial axis {i} (kernel {kernel[i]}, "
                 f"stride {strides[i]}, pads {pads[i]}+{pads[i + rank]})", ShapeError)
        result.append((lo, pooled(lo + 1) != out))
    return result
