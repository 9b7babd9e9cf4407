"""Strided device copies: copy_strided (the structural ops' copies and Transpose, in
structural.py) and make_contiguous (what CudaProvider.contiguous calls for a non-contiguous
GPUArray), both one width-based kernel (cuda/layout.cu).  Also the dense strides, dimension
collapsing and plan packing that every strided kernel (cuda/strided.cuh) shares."""
import math

import numpy as np

from .compiler import Kernel, module
from .launch import MAX_RANK


def dense_strides(shape):
    """Element strides of a C-contiguous array of `shape`."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= int(d)
    return strides[::-1]


def collapse(shape, *strides):
    """The fewest dims that index the same elements as the dense index space `shape` with
    operands of the given element strides laid over it: size-1 dims go, and a dim merges into
    the next inner one where every operand steps over the pair as one run.  Returns
    (sizes, [strides of each operand])."""
    sizes, merged = [], [[] for _ in strides]
    for d, n in enumerate(shape):
        if n == 1:
            continue
        if sizes and all(m[-1] == s[d] * n for m, s in zip(merged, strides)):
            sizes[-1] *= n
            for m, s in zip(merged, strides):
                m[-1] = s[d]
        else:
            sizes.append(n)
            for m, s in zip(merged, strides):
                m.append(s[d])
    return sizes, merged


def plan_args(sizes, strides):
    """The kernel arguments `rank, StridedPlan<K>` (K = len(strides)) of collapsed dims."""
    if len(sizes) > MAX_RANK:
        raise ValueError(f"a strided CUDA kernel takes at most {MAX_RANK} dims once merged, "
                         f"not {len(sizes)} (sizes {tuple(sizes)})")
    pad = MAX_RANK - len(sizes)
    args = [len(sizes), *sizes, *([1] * pad)]
    for s in strides:
        args += [*s, *([0] * pad)]
    return args


def plan_signature(operands):
    """Signature codes of `rank, StridedPlan<operands>`."""
    return "i" + "q" * (MAX_RANK * (operands + 1))


def element_strides(value):
    """A GPUArray's strides in elements."""
    item = value.dtype.itemsize
    if any(s % item for s in value.strides):
        raise ValueError(f"strides {value.strides} are not whole {value.dtype} elements")
    return [s // item for s in value.strides]


class _ByWidth(Kernel):
    """A kernel instantiated per element width (<name>_w1 ... _w8), not per float type: a gather
    only moves elements, so one serves floats, int64 indices and bool masks alike."""

    def function(self, dtype):
        width = np.dtype(dtype).itemsize
        fn = self._functions.get(width)
        if fn is None:
            if width not in (1, 2, 4, 8):
                raise TypeError(f"no {self.name} kernel for elements of {width} bytes ({np.dtype(dtype)})")
            fn = module(self.family).get_function(f"{self.name}_w{width}")
            fn.prepare(self.signature)
            self._functions[width] = fn
        return fn


_COPY = _ByWidth("layout", "strided_copy", "PPq" + plan_signature(2))


def copy_strided(provider, dtype, src, src_strides, dst, dst_strides, shape):
    """dst[index * dst_strides] = src[index * src_strides] over the index space `shape` (src and
    dst device addresses).  Beyond MAX_RANK dims once collapsed, one launch per leading index."""
    n = math.prod(shape)
    if n == 0:
        return
    sizes, (s, d) = collapse(shape, src_strides, dst_strides)
    if len(sizes) <= MAX_RANK:
        _COPY.launch_elements(provider, dtype, n, src, dst, n, *plan_args(sizes, [s, d]))
        return
    item = np.dtype(dtype).itemsize
    for i in range(shape[0]):
        copy_strided(provider, dtype, src + i * src_strides[0] * item, src_strides[1:],
                     dst + i * dst_strides[0] * item, dst_strides[1:], shape[1:])


PIECES_PER_LAUNCH = 4
_CONCAT_PIECES = _ByWidth("layout", "concat_pieces", "PqqqPPPPqqqq")
_SPLIT_PIECES = _ByWidth("layout", "split_pieces", "PqqqPPPPqqqq")


def concat_pieces(provider, dtype, whole, pieces, widths, outer):
    """Each of whole's `outer` rows = the dense pieces' rows (widths[j] elements each) side by
    side: Concat along one axis, PIECES_PER_LAUNCH pieces a launch."""
    _launch_pieces(_CONCAT_PIECES, provider, dtype, whole, pieces, widths, outer)


def split_pieces(provider, dtype, whole, pieces, widths, outer):
    """Each dense piece's rows = its columns of whole's rows (Split along one axis); a None piece
    is skipped.  PIECES_PER_LAUNCH pieces a launch."""
    _launch_pieces(_SPLIT_PIECES, provider, dtype, whole, pieces, widths, outer)


def _launch_pieces(kernel, provider, dtype, whole, pieces, widths, outer):
    row, first = sum(widths), 0
    for start in range(0, len(pieces), PIECES_PER_LAUNCH):
        group = range(start, min(start + PIECES_PER_LAUNCH, len(pieces)))
        pad = [0] * (PIECES_PER_LAUNCH - len(group))
        pointers = [0 if pieces[j] is None else pieces[j] for j in group] + pad
        span = sum(widths[j] for j in group)
        if any(pieces[j] is not None for j in group):
            kernel.launch_elements(provider, dtype, outer * span, whole, row, first, outer, *pointers,
                                   *[widths[j] for j in group], *pad)
        first += span


def make_contiguous(provider, value):
    """A new C-contiguous GPUArray with the elements of the strided view `value`, in one launch
    (a view of more than MAX_RANK merged dims is refused by plan_args)."""
    out = provider.empty(value.shape, value.dtype)
    if out.size:
        sizes, strides = collapse(value.shape, element_strides(value), element_strides(out))
        _COPY.launch_elements(provider, value.dtype, out.size, value, out, out.size, *plan_args(sizes, strides))
    return out
