"""Geometry of the convolution family: attributes checked and resolved into one ConvGeometry.

Conv, ConvGrad, ConvTranspose and ConvTransposeGrad are all built on one convolution between an
*image* side and a *column* side: Conv maps image X to columns Y, ConvTranspose maps columns X
to image Y.  Along each spatial axis, column position o reads image position
    o * stride - pad_begin + k * dilation      (k = 0 .. kernel-1; outside the image: zero).
A ConvGeometry holds both sides' shapes and that mapping; the kernels need nothing else.

The rules follow ONNX (and its reference implementation, onnx/reference/ops/op_conv*.py):
  * Conv, auto_pad SAME_UPPER/SAME_LOWER: out = ceil(in / stride), total pad =
    max(0, (out - 1) * stride + dilated_kernel - in); an odd pad puts the extra one at the end
    (SAME_UPPER) or at the beginning (SAME_LOWER).  VALID: no padding.
  * ConvTranspose: out = stride * (in - 1) + output_padding + dilated_kernel - pad_begin - pad_end.
    When `output_shape` is given (or auto_pad is SAME_*, which means output_shape = in * stride)
    the pads are derived from it and `pads` is ignored: total = stride * (in - 1) +
    output_padding + dilated_kernel - output_shape, split with the extra one at the end for
    SAME_UPPER and at the beginning otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from ..caches import bounded_cache, freeze
from ..errors import OpAttributeError, ShapeError

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclass(frozen=True)
class ConvGeometry:
    """One resolved convolution; per-axis tuples have one entry per spatial axis.

    img_channels/col_channels: channels on the image and column sides (all groups);
    the weight is (col_channels, img_channels // group, *kernel) for Conv, the same array
    read as (in, out // group, *kernel) by ConvTranspose."""
    group: int
    img_channels: int
    col_channels: int
    img_spatial: tuple
    col_spatial: tuple
    kernel: tuple
    strides: tuple
    dilations: tuple
    pads_begin: tuple
    pads_end: tuple

    def __hash__(self):
        """The fields' hash, computed once: kernels look the geometry up in several caches on
        every call."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

    @property
    def rank(self):
        return len(self.kernel)

    @property
    def pads(self):
        """ONNX layout: begins then ends."""
        return self.pads_begin + self.pads_end

    @property
    def is_pointwise(self):
        """A 1x1 convolution with stride 1 and no padding: the columns are the image itself."""
        return (all(k == 1 for k in self.kernel) and all(s == 1 for s in self.strides)
                and not any(self.pads_begin) and not any(self.pads_end))

    def transposed(self):
        """The geometry of dX = conv(dY, flipped W) for a stride-1 convolution: the column side
        becomes the image, pads become dilated_kernel - 1 - pad."""
        assert all(s == 1 for s in self.strides)
        ext = [d * (k - 1) for k, d in zip(self.kernel, self.dilations)]
        return ConvGeometry(self.group, self.col_channels, self.img_channels, self.col_spatial,
                            self.img_spatial, self.kernel, self.strides, self.dilations,
                            tuple(e - p for e, p in zip(ext, self.pads_begin)),
                            tuple(e - p for e, p in zip(ext, self.pads_end)))


def _dilated(k, d):
    return (k - 1) * d + 1


def _ints(attrs, name, n, default, who, minimum):
    """An ints attribute of length n (or default when absent), every entry >= minimum."""
    value = attrs.get(name)
    if value is None:
        return (default,) * n
    value = tuple(value)
    if len(value) != n:
        raise OpAttributeError(f"{who}: attribute {name!r}={list(value)} must have {n} entries "
                               f"(one per spatial axis), got {len(value)}")
    if any(v < minimum for v in value):
        what = "positive" if minimum == 1 else "non-negative"
        raise OpAttributeError(f"{who}: attribute {name!r}={list(value)} must be {what}")
    return value


def _common(who, x_shape, w_shape, attrs, w_channels_axis_name):
    """Checks shared by Conv and ConvTranspose; returns (rank, group, kernel, strides, dilations,
    auto_pad)."""
    if len(x_shape) not in (3, 4, 5):
        raise ShapeError(f"{who}: input 'X' has shape {tuple(x_shape)} (rank {len(x_shape)}); expected "
                         f"rank 3, 4 or 5 (N, C and 1 to 3 spatial axes)")
    if len(w_shape) != len(x_shape):
        raise ShapeError(f"{who}: input 'W' has shape {tuple(w_shape)} (rank {len(w_shape)}) but 'X' has "
                         f"shape {tuple(x_shape)} (rank {len(x_shape)}); the ranks must match")
    n = len(x_shape) - 2
    group = attrs.get("group", 1)
    if group is None:
        group = 1
    if group < 1:
        raise OpAttributeError(f"{who}: attribute 'group'={group} must be >= 1")
    kernel = tuple(w_shape[2:])
    given = attrs.get("kernel_shape")
    if given is not None:
        if len(given) != n:
            raise OpAttributeError(f"{who}: attribute 'kernel_shape'={list(given)} must have {n} entries "
                                   f"(one per spatial axis), got {len(given)}")
        if all(isinstance(k, int) for k in kernel) and tuple(given) != kernel:
            raise OpAttributeError(f"{who}: attribute 'kernel_shape'={list(given)} does not match the "
                                   f"spatial dims of 'W' {tuple(w_shape)}")
        kernel = tuple(given)
    if any(isinstance(k, int) and k < 1 for k in kernel):
        raise ShapeError(f"{who}: input 'W' has shape {tuple(w_shape)}: kernel dims must be >= 1")
    strides = _ints(attrs, "strides", n, 1, who, 1)
    dilations = _ints(attrs, "dilations", n, 1, who, 1)
    auto_pad = attrs.get("auto_pad") or "NOTSET"
    if auto_pad not in AUTO_PADS:
        raise OpAttributeError(f"{who}: attribute 'auto_pad'={auto_pad!r} must be one of {list(AUTO_PADS)}")
    pads = attrs.get("pads")
    if pads is not None:
        _ints(attrs, "pads", 2 * n, 0, who, 0)
    return n, group, kernel, strides, dilations, auto_pad


def _check_groups(who, channels, channels_name, group):
    if isinstance(channels, int) and channels % group:
        raise ShapeError(f"{who}: {channels_name} has {channels} channels, which is not divisible by "
                         f"group={group}")


def conv_geometry(who, x_shape, w_shape, attrs):
    """Check Conv's inputs and attributes; return the ConvGeometry (image = X, columns = Y).

    Spatial dims of X must be concrete ints; the batch dim may be symbolic."""
    n, group, kernel, strides, dilations, auto_pad = _common(who, x_shape, w_shape, attrs, "C_out")
    c_in, c_out = x_shape[1], w_shape[0]
    _check_groups(who, c_in, "input 'X'", group)
    _check_groups(who, c_out, "input 'W' (dim 0, output channels)", group)
    if isinstance(c_in, int) and w_shape[1] * group != c_in:
        raise ShapeError(f"{who}: input 'W' {tuple(w_shape)} has {w_shape[1]} input channels per group, but "
                         f"'X' {tuple(x_shape)} has {c_in} channels and group={group} "
                         f"(expected {c_in // group})")
    spatial = tuple(x_shape[2:])
    pads = attrs.get("pads")
    if auto_pad != "NOTSET" and pads is not None and any(pads):
        raise OpAttributeError(f"{who}: attribute 'pads'={list(pads)} cannot be combined with "
                               f"auto_pad={auto_pad!r}")
    begin, end = [], []
    for i in range(n):
        dk = _dilated(kernel[i], dilations[i])
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = -(-spatial[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + dk - spatial[i])
            head = (total + 1) // 2 if auto_pad == "SAME_LOWER" else total // 2
            begin.append(head)
            end.append(total - head)
        elif auto_pad == "VALID" or pads is None:
            begin.append(0)
            end.append(0)
        else:
            begin.append(pads[i])
            end.append(pads[i + n])
    out_spatial = []
    for i in range(n):
        dk = _dilated(kernel[i], dilations[i])
        padded = spatial[i] + begin[i] + end[i]
        if padded < dk:
            raise ShapeError(
                f"{who}: the kernel is larger than the padded input along spatial axis {i}: kernel "
                f"{kernel[i]} with dilation {dilations[i]} spans {dk}, but 'X' {tuple(x_shape)} padded by "
                f"({begin[i]}, {end[i]}) is {padded}")
        out_spatial.append((padded - dk) // strides[i] + 1)
    return ConvGeometry(group, c_in, c_out, spatial, tuple(out_spatial), kernel, strides, dilations,
                        tuple(begin), tuple(end))


def conv_transpose_geometry(who, x_shape, w_shape, attrs):
    """Check ConvTranspose's inputs and attributes; return the ConvGeometry (columns = X,
    image = Y).  W is (C_in, C_out / group, *kernel)."""
    n, group, kernel, strides, dilations, auto_pad = _common(who, x_shape, w_shape, attrs, "C_in")
    c_in = x_shape[1]
    _check_groups(who, c_in, "input 'X'", group)
    if isinstance(c_in, int) and w_shape[0] != c_in:
        raise ShapeError(f"{who}: input 'W' {tuple(w_shape)} has {w_shape[0]} input channels (dim 0), but "
                         f"'X' {tuple(x_shape)} has {c_in}")
    c_out = w_shape[1] * group
    spatial = tuple(x_shape[2:])
    output_padding = _ints(attrs, "output_padding", n, 0, who, 0)
    if any(p >= max(s, d) for p, s, d in zip(output_padding, strides, dilations)):
        raise OpAttributeError(f"{who}: attribute 'output_padding'={list(output_padding)} must be smaller than "
                               f"the stride or the dilation of its axis (strides {list(strides)}, "
                               f"dilations {list(dilations)})")
    output_shape = attrs.get("output_shape")
    if output_shape is not None:
        output_shape = tuple(output_shape)
        if len(output_shape) == n + 2:   # some exporters write (N, C, *spatial)
            output_shape = output_shape[2:]
        if len(output_shape) != n:
            raise OpAttributeError(f"{who}: attribute 'output_shape'={list(attrs['output_shape'])} must have "
                                   f"{n} entries (one per spatial axis)")
        if any(v < 1 for v in output_shape):
            raise OpAttributeError(f"{who}: attribute 'output_shape'={list(output_shape)} must be positive")
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        output_shape = tuple(s * st for s, st in zip(spatial, strides))
    pads = attrs.get("pads")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER", "VALID") and pads is not None and any(pads):
        raise OpAttributeError(f"{who}: attribute 'pads'={list(pads)} cannot be combined with "
                               f"auto_pad={auto_pad!r}")
    begin, end, out_spatial = [], [], []
    for i in range(n):
        dk = _dilated(kernel[i], dilations[i])
        full = strides[i] * (spatial[i] - 1) + output_padding[i] + dk
        if output_shape is not None:
            total = full - output_shape[i]
            tail = total // 2
            head = total - tail
            if auto_pad == "SAME_UPPER":
                head, tail = tail, head
            begin.append(head)
            end.append(tail)
            out_spatial.append(output_shape[i])
        else:
            b, e = (0, 0) if pads is None or auto_pad == "VALID" else (pads[i], pads[i + n])
            begin.append(b)
            end.append(e)
            out_spatial.append(full - b - e)
            if out_spatial[-1] < 1:
                raise ShapeError(
                    f"{who}: the output would be empty along spatial axis {i}: input {spatial[i]}, stride "
                    f"{strides[i]}, kernel {kernel[i]} (dilation {dilations[i]}), output_padding "
                    f"{output_padding[i]} and pads ({b}, {e}) give {out_spatial[-1]}")
    return ConvGeometry(group, c_out, c_in, tuple(out_spatial), spatial, kernel, strides, dilations,
                        tuple(begin), tuple(end))


@bounded_cache("conv geometry")
def _cached(kind, who, x_shape, w_shape, frozen):
    attrs = dict(frozen)
    fn = conv_geometry if kind == "conv" else conv_transpose_geometry
    return fn(who, x_shape, w_shape, attrs)


def geometry_for(kind, who, x_shape, w_shape, attrs, frozen=None):
    """conv_geometry / conv_transpose_geometry (kind "conv" or "transpose"), cached per shapes
    and attributes: kernels call this on every run.  `frozen`: freeze(attrs), where the caller
    keeps it (a bound node's KernelContext.frozen_attrs())."""
    return _cached(kind, who, tuple(x_shape), tuple(w_shape), freeze(attrs) if frozen is None else frozen)


def three_axes(values, fill, rank):
    """Per-axis values of a rank-`rank` geometry as three axes (leading axes of `fill`)."""
    return (fill,) * (3 - rank) + tuple(values)


def packed_geometry(geom):
    """The geometry as the kernels read it (ext/conv.pyx's array, cuda/conv.cu's ConvGeo), every
    rank padded to 3D: group, image and column channels per group, then image sizes, column
    sizes, kernel, strides, dilations and begin pads, three each (21 ints)."""
    r, g = geom.rank, geom.group
    return ((g, geom.img_channels // g, geom.col_channels // g)
            + three_axes(geom.img_spatial, 1, r) + three_axes(geom.col_spatial, 1, r)
            + three_axes(geom.kernel, 1, r) + three_axes(geom.strides, 1, r) + three_axes(geom.dilations, 1, r)
            + three_axes(geom.pads_begin, 0, r))
