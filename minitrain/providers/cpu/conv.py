"""CPU kernels of Conv, ConvTranspose, ConvGrad and ConvTransposeGrad.

Three primitives on a ConvGeometry (image side, column side; see ops/conv_geometry.py) do all
the work:
  * conv_forward:     columns = W (*) image          (Conv; ConvTransposeGrad's dX)
  * conv_data_grad:   image = W^T (*) columns        (ConvGrad's dX; ConvTranspose)
  * conv_weight_grad: dW = columns . im2col(image)   (ConvGrad's dW; ConvTransposeGrad's dW)
and the bias gradient is a per-channel sum.  Three implementations back them (`route` picks):
  * depthwise (_ext.conv_depthwise): stride-1 convolutions with one image channel and one or
    two column channels per group, the image rows read in place with the pads masked off at the
    row ends and Y written directly: no grid copy, no crop, which is most of the direct kernels'
    time when each point meets a single channel's few taps.  The data gradient is the same
    kernel on the columns with the flipped weight; the weight gradient per channel dot products
    of dY with the shifted image, OpenMP over (channel, sample chunk) items.  The same
    convolutions at stride 2 ("depthwise_strided") run on the stride-1 grid: its output
    subsampled, or the columns placed on it with zeros between them for the gradients.
  * direct (_ext.conv_direct): SIMD microkernels over a copy of the image in which every tap is
    one constant offset (the shifted grid, or the width-unrolled grid where the shifted grid's
    garbage columns would cost more than the wider copy: `unrolls`), OpenMP over (sample chunk,
    group) items, no BLAS.  The data gradient is, at stride 1, the forward convolution of the
    columns with the flipped, transposed weight, else a correlation of the columns for each
    stride phase of the image.
  * gemm (_ext.conv): im2col / col2im tiles and BLAS sgemm/dgemm, for 1x1 convolutions (plain
    GEMMs) and for batches too small to give every thread an item, where BLAS threads the
    products instead.
  * rows: 1x1 convolutions of one group on planes of a single point (a squeeze-excitation's,
    after global pooling): the batch's (N, C) rows times the weight, one GEMM for the whole
    batch where the gemm path makes one per sample.
"""
import dataclasses
import functools
import threading

import numpy as np

from ..._ext import conv as _conv
from ..._ext import conv_depthwise as _depthwise
from ..._ext import conv_direct as _direct
from ...caches import bounded_cache
from ...errors import ShapeError
from ...ops.conv_geometry import geometry_for, packed_geometry, three_axes
from ...ops.schema import MS_DOMAIN
from ...ops.shape_utils import numel
from ...registry import register_kernel
from ...threads import kernel_threads
from .blas import blas_threads
from .blas import gemm as blas_gemm

# Bytes of im2col scratch per thread and tile: a tile of the column matrix stays in L2.
TILE_BYTES = 256 * 1024
MIN_TILE = 64
# Bytes of direct-convolution scratch (shifted-grid image + output grid) per work item.
DIRECT_BYTES = 384 * 1024
# The most bytes of weight-gradient scratch (image grid + dy grid) per work item: more samples per
# item let each microkernel call sum over more points before its horizontal sums, up to the
# point where the grids no longer stay in the last-level cache while the row blocks pass.
WEIGHT_GRAD_ITEM_BYTES = 8 << 20
# Grid points one kernel-B call sums over: enough that its closing horizontal sums cost little,
# few enough that the call's channel of the image grid stays in L1 while every block of dy rows
# streams past it (ext/conv_direct.pyx runs the channels in the outer loop).  The same as
# conv_direct.pyx's PIECE.
WEIGHT_GRAD_CALL_POINTS = 2048
# The largest dimension or leading dimension BLAS takes: its ints are 32-bit.
BLAS_INT_MAX = 2 ** 31 - 1


# --------------------------------------------------------------------------- geometry
@functools.lru_cache(maxsize=256)
def geo_array(geom):
    """The geometry as conv.pyx and conv_depthwise.pyx read it: every rank padded to 3D; kept
    per geometry (read-only), as a step runs the same convolutions every time."""
    geo = np.array(packed_geometry(geom), dtype=np.int64)
    geo.flags.writeable = False
    return geo


@functools.lru_cache(maxsize=256)
def transposed_geometry(geom):
    """geom.transposed(), kept per geometry: the stride-1 data gradient asks for it every call."""
    return geom.transposed()


def _tile(geom, itemsize):
    """Columns per im2col tile: the scratch tile holds about TILE_BYTES."""
    k = geom.img_channels // geom.group * numel(geom.kernel)
    p = numel(geom.col_spatial)
    t = max(MIN_TILE, TILE_BYTES // max(1, k * itemsize))
    if t >= p:
        return p
    ntiles = -(-p // t)
    return -(-p // ntiles)   # even tiles


def _schedule(work_items, nt):
    """True: OpenMP over work items with single-threaded BLAS; False: items in turn, BLAS
    threaded.  OpenMP over items wins as soon as every thread gets whole items to run."""
    return nt > 1 and work_items >= nt


_LOCAL = threading.local()


def _scratch(nt, size, dtype, name="scratch"):
    """A (nt, size) work array, 64-byte aligned, kept per Python thread and reused across calls
    (fresh large arrays cost a page fault per page on every call)."""
    need = nt * max(1, size)
    cache = getattr(_LOCAL, "buffers", None)
    if cache is None:
        cache = _LOCAL.buffers = {}
    key = (name, dtype)
    buf = cache.get(key)                 # kept 64-byte aligned
    if buf is None or buf.size < need:
        dtype = np.dtype(dtype)
        raw = np.empty(need + 64, dtype=dtype)
        start = (-raw.ctypes.data % 64) // dtype.itemsize
        buf = cache[key] = raw[start:start + need]
    return buf[:need].reshape(nt, max(1, size))


_NO_BIAS = {np.dtype(np.float32): np.empty(0, np.float32), np.dtype(np.float64): np.empty(0, np.float64)}


# --------------------------------------------------------------------------- direct kernels
_A_VARIANTS = _direct.a_variants()
_B_VARIANTS = _direct.b_variants()
_SIMD = _direct.simd_bytes()


@functools.lru_cache(maxsize=64)
def _a_variant(m):
    """Kernel A's microkernel for m output rows: fewest padded rows, then the widest block."""
    return min(range(len(_A_VARIANTS)),
               key=lambda v: (-(-m // _A_VARIANTS[v][0]) * _A_VARIANTS[v][0], -_A_VARIANTS[v][0]))


def _pack_weight_a(w, g, m, c, taps, mr):
    """A conv-layout weight (G*M, C, taps) as kernel A reads it: [g][m block][c][tap][mr],
    zero rows past M (one copy when M is a multiple of mr)."""
    blocks = -(-m // mr)
    if blocks * mr != m:
        padded = np.zeros((g, blocks * mr, c, taps), dtype=w.dtype)
        padded[:, :m] = w.reshape(g, m, c, taps)
        w = padded
    return np.ascontiguousarray(w.reshape(g, blocks, mr, c, taps).transpose(0, 1, 3, 4, 2))


def _b_variant(m, taps):
    """Kernel B's row blocking: single rows for one output channel (depthwise); else of the two
    blockings of several rows the one that pads M to fewer rows (padded rows cost as much as
    real ones: 12 output channels are two blocks of 6, not two of 8); on a tie the blocks of 4
    taps where those divide the kernel's taps and blocks of 3 do not, else blocks of 3 taps."""
    if m == 1:
        return 1
    padded = {v: -(-m // _B_VARIANTS[v][0]) * _B_VARIANTS[v][0] for v in (0, 2)}
    if padded[0] != padded[2]:
        return min(padded, key=padded.get)
    return 2 if taps % _B_VARIANTS[2][1] == 0 and taps % _B_VARIANTS[0][1] else 0


def _balanced_batch(n, g, most, nt):
    """Samples per work item, between most/2 and `most`, that load the threads of a static
    schedule over the (chunk, group) items most evenly (ties: the larger batch)."""
    def busiest(b):
        chunks = -(-n // b)
        items, short = chunks * g, b - (n - b * (chunks - 1))   # the last chunk's items hold fewer
        share = -(-items // nt)
        last = (chunks - 1) * g
        return max((min(items, (t + 1) * share) - t * share) * b
                   - max(0, min(items, (t + 1) * share) - max(last, t * share)) * short
                   for t in range(nt) if t * share < items)
    return min(range(most, max(1, most // 2) - 1, -1), key=lambda b: (busiest(b), -b))


# The plan of ext/conv_plan.h: these dtypes mirror its structs, checked against the build below.
PLAN_HEAD = np.dtype([(name, np.int64) for name in (
    "G", "C", "M", "Ud", "Uh", "Uw", "L", "B", "nph", "ID", "IH", "IW", "SD", "SH", "SW", "PD", "PH", "PW",
    "nsub", "noff", "KU", "OW", "DW")])
PLAN_SUB = np.dtype([(name, np.int64) for name in (
    "Od", "Oh", "Ow", "Pext", "taps", "off_index", "w_index", "ycol", "ysd", "ysh", "ysw", "ybase")])


def check_plan_layout(layout):
    """Raise ImportError unless `layout` (conv_direct.plan_layout()) matches PLAN_HEAD and
    PLAN_SUB field by field: names, byte offsets and sizes."""
    for key, dtype in (("plan", PLAN_HEAD), ("sub", PLAN_SUB)):
        size, fields = layout[key]
        ours = [(name, dtype.fields[name][1]) for name in dtype.names]
        if size != dtype.itemsize or [tuple(f) for f in fields] != ours:
            raise ImportError(f"minitrain._ext.conv_direct lays out its {key} struct as {size} bytes {fields}; "
                              f"providers/cpu/conv.py expects {dtype.itemsize} bytes {ours}: rebuild the extension")


check_plan_layout(_direct.plan_layout())


def plan_buffer(head, phases, subs, offsets):
    """The plan's bytes: `head` (field -> value of PLAN_HEAD but the counts), phase triples,
    sub-problem records (dicts of PLAN_SUB's fields), tap offsets; read-only, for the caches."""
    sections = [np.zeros(1, PLAN_HEAD), np.asarray(phases, dtype=np.int64).reshape(-1, 3),
                np.zeros(len(subs), PLAN_SUB), np.asarray(offsets, dtype=np.int64)]
    sections[0][0] = tuple({**head, "nph": len(phases), "nsub": len(subs), "noff": len(offsets)}[name]
                           for name in PLAN_HEAD.names)
    sections[2][:] = [tuple(sub[name] for name in PLAN_SUB.names) for sub in subs]
    buf = np.empty(sum(s.nbytes for s in sections), dtype=np.uint8)
    start = 0
    for section in sections:
        buf[start:start + section.nbytes] = section.view(np.uint8).reshape(-1)
        start += section.nbytes
    buf.flags.writeable = False
    return buf


def _assemble_plan(g, c, m, u, img, strides, pads, phases, subs, n, itemsize, slack, rows, nt,
                   block_rows=None, unrolled=None):
    """The plan of conv_direct.pyx (see ext/conv_plan.h).  `subs`: (output grid, tap offsets,
    w_index, placement) per sub-problem, the offsets a function of the grid (Ud, Uh, Uw).  B
    samples per work item are chosen so that every thread gets items and, for kernel A, an
    item's scratch stays near DIRECT_BYTES (`rows`: output-grid rows per sample held in
    scratch); for kernel B (`block_rows`: dy rows one microkernel call streams) so that a call
    sums over about WEIGHT_GRAD_CALL_POINTS grid points while the dy rows it streams (Pext points
    of each sample, whatever the phases the image has) stay in L2.  `unrolled`: (KU, OW, DW) of
    the width-unrolled grid, whose rows hold the B samples of an item side by side (u[2] is one
    sample's width OW; the grid's is B * OW).
    Returns (plan, B, L)."""
    def layout(u):
        plane = u[0] * u[1] * u[2]
        length = -(-(len(phases) * plane + slack) // 16) * 16
        records, offsets = [], []
        for out, offs, w_index, placement in subs:
            if unrolled:        # every column of the grid's rows is an output point
                pext = ((out[0] - 1) * u[1] + out[1]) * u[2]
            else:
                pext = ((out[0] - 1) * u[1] + out[1] - 1) * u[2] + out[2]
            tap_offsets = offs(u)
            records.append(dict(zip(("Od", "Oh", "Ow"), out), Pext=pext, taps=len(tap_offsets),
                                off_index=len(offsets), w_index=w_index,
                                **dict(zip(("ycol", "ysd", "ysh", "ysw", "ybase"), placement))))
            offsets.extend(tap_offsets)
        return length, records, offsets

    length, records, _ = layout(u)       # per sample
    if block_rows is None:
        b = max(1, min(n, DIRECT_BYTES // max(1, (c + rows) * length * itemsize)))
    else:
        pext = records[0]["Pext"]      # the grid points of a sample that a call streams
        b = max(1, min(n, -(-WEIGHT_GRAD_CALL_POINTS // pext), (256 << 10) // (block_rows * pext * itemsize),
                       WEIGHT_GRAD_ITEM_BYTES // ((c + rows) * length * itemsize)))
    if nt > 1:
        b = _balanced_batch(n, g, b, nt)
    ku, ow, dw = unrolled or (0, 0, 0)
    if unrolled:
        u = (u[0], u[1], b * ow)
        length, records, offsets = layout(u)
    else:
        _, _, offsets = layout(u)
    head = dict(zip(("G", "C", "M", "Ud", "Uh", "Uw", "L", "B"), (g, c, m, *u, length, b)),
                **dict(zip(("ID", "IH", "IW"), img)), **dict(zip(("SD", "SH", "SW"), strides)),
                **dict(zip(("PD", "PH", "PW"), pads)), KU=ku, OW=ow, DW=dw)
    return plan_buffer(head, phases, records, offsets), b, length


# The width-unrolled grid (ext/conv_plan.h) drops the shifted grid's garbage columns (its rows
# are Ow + (KW - 1) * dilation / stride wide for Ow outputs) but copies the image KW times, and
# its KW copies of a row no longer share cache lines between taps.  The copies weigh less the
# more output channels reuse them, so a kernel runs on it when the share of garbage columns
# times the output channels per group reaches its threshold.  The weight gradient's threshold is
# lower: there the unrolled grid also leaves each microkernel call whole tap blocks (the KH taps
# of a grid channel).  A 3x3 convolution with 64 channels and 6% garbage columns (ResNet-like,
# strided) is at 3.8: its weight gradient unrolls, its forward pass does not; dilated 3x3 (7.1)
# and LeNet's conv2 (4.6) unroll both; LeNet's conv1, depthwise and 1D cases stay far below.
UNROLL_MIN_GAIN = {"forward": 4.0, "weight_grad": 3.5}


def unrolls(geom, kernel="forward"):
    """Whether the direct `kernel` ("forward" or "weight_grad") runs `geom` (image -> columns) on
    the width-unrolled grid."""
    kw, d, s = geom.kernel[-1], geom.dilations[-1], geom.strides[-1]
    ow = geom.col_spatial[-1]
    width = ow + max((k * d) // s for k in range(kw))
    return kw > 1 and (width - ow) / width * (geom.col_channels // geom.group) >= UNROLL_MIN_GAIN[kernel]


def _unrolled_weight(w, geom):
    """W (G*M, C, *k) with the width taps moved next to the channels: (G*M, C*KW, other taps),
    the weight of the convolution on the width-unrolled grid."""
    r = geom.rank
    order = (0, 1, r + 1) + tuple(range(2, r + 1))
    return np.ascontiguousarray(w.transpose(order)).reshape(w.shape[0], w.shape[1] * w.shape[-1], -1)


def shared_pad_width(ow, span, iw, pad):
    """The row width of a stride-1 shifted grid whose rows share their pad columns: a tap that
    reads past a row's end lands in the next row's leading pad, which is zero, so the row needs
    only ow outputs, the image's columns and enough of the right pad that no real column is
    read through that wrap (span: the widest tap shift)."""
    return max(ow, iw + pad, ow + span - pad)


@bounded_cache("cpu conv direct_plan")
def direct_plan(geom, n, itemsize, slack, rows, nt, block_rows=None, unrolled=False):
    """The plan of a convolution (image -> columns): stride phases of the image, one offset per
    tap (taps in W's order), one sub-problem.  `unrolled`: on the width-unrolled grid, whose
    taps are those of the kernel's leading axes (W's order without the width axis)."""
    r = geom.rank
    out = three_axes(geom.col_spatial, 1, r)
    kernel, strides = three_axes(geom.kernel, 1, r), three_axes(geom.strides, 1, r)
    dil = three_axes(geom.dilations, 1, r)
    if unrolled:       # the width axis becomes grid channels: one column shift, no phase
        kernel, grid_strides, grid_dil = kernel[:2] + (1,), strides[:2] + (1,), dil[:2] + (1,)
    else:
        grid_strides, grid_dil = strides, dil
    shifts = [[(k * d) // s for k in range(kk)] for kk, d, s in zip(kernel, grid_dil, grid_strides)]
    residues = [[(k * d) % s for k in range(kk)] for kk, d, s in zip(kernel, grid_dil, grid_strides)]
    used = [sorted(set(res)) for res in residues]
    u = [o + max(q) for o, q in zip(out, shifts)]
    if not unrolled and grid_strides[2] == 1:
        u[2] = shared_pad_width(out[2], max(shifts[2]), geom.img_spatial[-1], geom.pads_begin[-1])
    phases = [(a, b, c) for a in used[0] for b in used[1] for c in used[2]]
    index = {ph: i for i, ph in enumerate(phases)}

    def offsets(grid):
        plane = grid[0] * grid[1] * grid[2]
        return [index[(residues[0][kd], residues[1][kh], residues[2][kw])] * plane
                + (shifts[0][kd] * grid[1] + shifts[1][kh]) * grid[2] + shifts[2][kw]
                for kd in range(kernel[0]) for kh in range(kernel[1]) for kw in range(kernel[2])]
    g = geom.group
    c = geom.img_channels // g
    placement = (numel(out), out[1] * out[2], out[2], 1, 0)
    unroll = (geom.kernel[-1], out[2], dil[2]) if unrolled else None
    return _assemble_plan(g, c * (geom.kernel[-1] if unrolled else 1), geom.col_channels // g, u,
                          three_axes(geom.img_spatial, 1, r), strides, three_axes(geom.pads_begin, 0, r), phases,
                          [(out, offsets, 0, placement)], n, itemsize, slack, rows, nt, block_rows, unroll)


def _image_phases(size, stride, pad):
    """The stride phases (i + pad) % stride that image points i in [0, size) fall in, in
    increasing order: at most min(size, stride) of them, so planning costs nothing more for a
    huge stride."""
    if size >= stride:
        return range(stride)
    return sorted({(i + pad) % stride for i in range(size)})


@bounded_cache("cpu conv data_grad_plan")
def data_grad_plan(geom, n, itemsize, slack, rows, nt, mr):
    """The data gradient of a convolution as kernel-A sub-problems, one per stride phase of the
    image (a single one at stride 1, which direct_data_grad runs as a forward convolution
    instead).  Along an axis, image points i with (i + pad) % stride == phi receive exactly
    the taps k with (k * dilation) % stride == phi, from column o = u - (k * dilation) // stride
    where u = (i + pad) // stride: a stride-1 correlation of the columns.  All phases read one
    packed copy of the columns (pad Pc in front, so that every tap offset is >= 0).
    Returns (plan, B, L, [tap indices per phase], whether some image points get no tap)."""
    r = geom.rank
    kernel, strides = three_axes(geom.kernel, 1, r), three_axes(geom.strides, 1, r)
    dil, pads = three_axes(geom.dilations, 1, r), three_axes(geom.pads_begin, 0, r)
    img, cols = three_axes(geom.img_spatial, 1, r), three_axes(geom.col_spatial, 1, r)
    axes, pc, uncovered = [], [], False
    for a in range(3):
        options = []
        for phi in _image_phases(img[a], strides[a], pads[a]):
            u0 = -((phi - pads[a]) // strides[a])
            count = (pads[a] + img[a] - 1 - phi) // strides[a] + 1 - u0
            taps = [k for k in range(kernel[a]) if (k * dil[a]) % strides[a] == phi]
            if not taps:
                uncovered = True
                continue
            options.append((u0, count, phi, taps, [(k * dil[a]) // strides[a] for k in taps]))
        axes.append(options)
        pc.append(max((q - u0 for u0, _, _, _, qs in options for q in qs), default=0))
    extent = [max((count + u0 - min(qs) + pc[a] for u0, count, _, _, qs in axes[a]), default=1)
              for a in range(3)]
    g = geom.group
    m, c = geom.col_channels // g, geom.img_channels // g
    blocks = -(-c // mr)
    subs, tap_lists, w_index = [], [], 0
    for (ud0, nd, pd, td, qd), (uh0, nh, ph, th, qh), (uw0, nw, pw, tw, qw) in \
            [(x, y, z) for x in axes[0] for y in axes[1] for z in axes[2]]:
        offsets = [((ud0 - a + pc[0]) * extent[1] + uh0 - b + pc[1]) * extent[2] + uw0 - e + pc[2]
                   for a in qd for b in qh for e in qw]
        tap_count = len(offsets)
        i0 = [u0 * s + phi - p for u0, s, phi, p in zip((ud0, uh0, uw0), strides, (pd, ph, pw), pads)]
        placement = (numel(img), strides[0] * img[1] * img[2], strides[1] * img[2], strides[2],
                     (i0[0] * img[1] + i0[1]) * img[2] + i0[2])
        subs.append(((nd, nh, nw), lambda grid, offsets=offsets: offsets, w_index, placement))
        tap_lists.append([(kd * kernel[1] + kh) * kernel[2] + kw for kd in td for kh in th for kw in tw])
        w_index += g * blocks * mr * m * tap_count
    plan, b, length = _assemble_plan(g, m, c, extent, cols, (1, 1, 1), pc, [(0, 0, 0)], subs, n, itemsize, slack,
                                     rows, nt)
    return plan, b, length, tap_lists, uncovered


@dataclasses.dataclass(frozen=True)
class ForwardLaunch:
    """What a direct forward call needs besides its arrays: kernel A's plan and microkernel
    (variant, MR, NV), the grid channels and taps its packed weight has, whether the grid is
    width-unrolled, the per-thread scratch sizes and the output shape."""
    plan: np.ndarray
    variant: int
    mr: int
    nv: int
    channels: int
    taps: int
    unrolled: bool
    x_size: int
    y_size: int
    out_shape: tuple


@bounded_cache("cpu conv forward_launch")
def forward_launch(geom, n, dtype, nt):
    """The ForwardLaunch of a direct forward convolution, kept per (geometry, batch, dtype,
    threads): a step runs the same convolutions every time."""
    itemsize = np.dtype(dtype).itemsize
    g = geom.group
    m, c = geom.col_channels // g, geom.img_channels // g
    variant = _a_variant(m)
    mr, nv = _A_VARIANTS[variant]
    vw = _SIMD // itemsize
    rows = -(-m // mr) * mr
    unrolled = unrolls(geom)
    plan, b, length = direct_plan(geom, n, itemsize, nv * vw + vw, rows, nt, unrolled=unrolled)
    taps = numel(geom.kernel)
    if unrolled:       # grid channels (c, kw), taps of the leading axes
        c, taps = c * geom.kernel[-1], taps // geom.kernel[-1]
    passes = 1 if unrolled else b
    return ForwardLaunch(plan, variant, mr, nv, c, taps, unrolled, c * passes * length, rows * passes * length,
                         (n, geom.col_channels) + tuple(geom.col_spatial))


def _pack_flipped_weight_a(w, geom, mr):
    """_pack_weight_a of flipped_weight(w, geom) (the stride-1 data gradient's weight on the
    shifted grid) in one copy: [g][c block][m][tap][mr] = w[g, m, c, reversed tap], zero rows
    past C.  Reversing every spatial axis reverses the flattened taps."""
    g = geom.group
    m, c = geom.col_channels // g, geom.img_channels // g
    blocks = -(-c // mr)
    wg = w.reshape(g, m, c, -1)[..., ::-1]
    if blocks * mr != c:
        padded = np.zeros((g, m, blocks * mr, wg.shape[-1]), dtype=w.dtype)
        padded[:, :, :c] = wg
        wg = padded
    return np.ascontiguousarray(wg.reshape(g, m, blocks, mr, -1).transpose(0, 2, 1, 4, 3))


def direct_forward(img, w, bias, geom, nt, flipped_from=None):
    """conv_forward on the direct kernels.  `flipped_from`: the geometry whose stride-1 data
    gradient this is, w being that convolution's weight, flipped and transposed here."""
    run = forward_launch(geom, img.shape[0], img.dtype, nt)
    out = np.empty(run.out_shape, dtype=img.dtype)
    if flipped_from is not None and not run.unrolled:
        wp = _pack_flipped_weight_a(w, flipped_from, run.mr)
    else:
        if flipped_from is not None:
            w = flipped_weight(w, flipped_from)
        if run.unrolled:
            w = _unrolled_weight(w, geom)
        wp = _pack_weight_a(w, geom.group, geom.col_channels // geom.group, run.channels, run.taps, run.mr)
    _direct.forward(img.reshape(-1), wp.reshape(-1), _NO_BIAS[img.dtype] if bias is None else bias,
                    out.reshape(-1), run.plan, img.shape[0], run.variant, run.mr, run.nv,
                    _scratch(nt, run.x_size, img.dtype, "x"), _scratch(nt, run.y_size, img.dtype, "y"),
                    _scratch(nt, run.channels * run.taps, np.intp, "coff"), nt)
    return out


def direct_data_grad(cols, w, bias, geom, nt):
    """The data gradient: at stride 1 the convolution of the columns with the flipped,
    transposed weight; else kernel A over the stride phases of the image."""
    if all(s == 1 for s in geom.strides):
        return direct_forward(cols, w, bias, transposed_geometry(geom), nt, flipped_from=geom)
    n = cols.shape[0]
    g = geom.group
    m, c = geom.col_channels // g, geom.img_channels // g
    variant = _a_variant(c)
    mr, nv = _A_VARIANTS[variant]
    vw = _SIMD // cols.itemsize
    rows = -(-c // mr) * mr
    plan, b, length, tap_lists, uncovered = data_grad_plan(geom, n, cols.itemsize, nv * vw + vw, rows, nt, mr)
    shape = (n, geom.img_channels) + tuple(geom.img_spatial)
    if uncovered:   # image points no tap reaches: zero (or the bias)
        out = np.zeros(shape, dtype=cols.dtype)
        if bias is not None:
            out += bias.reshape((1, -1) + (1,) * geom.rank)
        if not tap_lists:
            return out
    else:
        out = np.empty(shape, dtype=cols.dtype)
    wt = w.reshape(g, m, c, -1).transpose(0, 2, 1, 3)          # (G, C, M, taps)
    wp = np.concatenate([_pack_weight_a(np.ascontiguousarray(wt[..., taps]), g, c, m, len(taps), mr).reshape(-1)
                         for taps in tap_lists])
    xbuf = _scratch(nt, m * b * length, cols.dtype, "x")
    ybuf = _scratch(nt, rows * b * length, cols.dtype, "y")
    coffs = _scratch(nt, m * max(len(taps) for taps in tap_lists), np.intp, "coff")
    _direct.forward(cols.reshape(-1), wp, _NO_BIAS[cols.dtype] if bias is None else bias, out.reshape(-1), plan,
                    n, variant, mr, nv, xbuf, ybuf, coffs, nt)
    return out


@dataclasses.dataclass(frozen=True)
class WeightGradLaunch:
    """What a direct weight-gradient call needs besides its arrays: kernel B's plan and row
    blocking, the padded rows of its accumulator, whether the grid is width-unrolled, and the
    per-thread scratch sizes."""
    plan: np.ndarray
    variant: int
    rows: int
    unrolled: bool
    x_size: int
    y_size: int


@bounded_cache("cpu conv weight_grad_launch")
def weight_grad_launch(geom, n, dtype, nt):
    """The WeightGradLaunch of a direct weight gradient, kept per (geometry, batch, dtype,
    threads)."""
    itemsize = np.dtype(dtype).itemsize
    g = geom.group
    m, c = geom.col_channels // g, geom.img_channels // g
    variant = _b_variant(m, numel(geom.kernel))
    mr2 = _B_VARIANTS[variant][0]
    rows = -(-m // mr2) * mr2
    vw = _SIMD // itemsize
    unrolled = unrolls(geom, "weight_grad")
    plan, b, length = direct_plan(geom, n, itemsize, 2 * vw, rows, nt, block_rows=mr2, unrolled=unrolled)
    passes = 1 if unrolled else b
    return WeightGradLaunch(plan, variant, rows, unrolled,
                            c * geom.kernel[-1] * length if unrolled else c * b * length, rows * passes * length)


def direct_weight_grad(cols, img, w_shape, geom, nt):
    """conv_weight_grad on the direct kernels: per-thread accumulators, summed at the end."""
    run = weight_grad_launch(geom, img.shape[0], img.dtype, nt)
    g = geom.group
    m, c = geom.col_channels // g, geom.img_channels // g
    rows = run.rows
    taps = numel(geom.kernel)
    acc = np.zeros((nt, g * rows * c * taps), dtype=img.dtype)
    _direct.weight_grad(cols.reshape(-1), img.reshape(-1), acc, run.plan, img.shape[0], run.variant,
                        _scratch(nt, run.x_size, img.dtype, "x"), _scratch(nt, run.y_size, img.dtype, "y"), nt)
    if nt > 1:
        total = np.empty(acc.shape[1], dtype=img.dtype)
        _conv.sum_rows(acc, total, nt)
    else:
        total = acc[0]
    if run.unrolled:       # (G, rows, C, KW, leading taps) -> W's order
        r = geom.rank
        total = total.reshape((g, rows, c, geom.kernel[-1]) + tuple(geom.kernel[:-1]))
        total = total.transpose((0, 1, 2) + tuple(range(4, r + 3)) + (3,))
    elif rows == m:        # already W's layout
        return total.reshape(w_shape)
    return np.ascontiguousarray(total.reshape(g, rows, c * taps)[:, :m]).reshape(w_shape)


# --------------------------------------------------------------------------- depthwise kernels
# Work items per thread of the depthwise weight gradient: enough for an even static schedule.
DEPTHWISE_ITEMS_PER_THREAD = 8
# The most output channels per group (the multiplier) routed to the depthwise kernels: their
# forward pass reads the image plane once per output channel, where the direct kernels' blocks
# of output channels share each load, and from 4 on the direct forward pass is the faster.
DEPTHWISE_MAX_MULTIPLIER = 2
# The largest stride of a depthwise convolution run on the stride-1 grid (depthwise_strided):
# there the in-place kernel computes stride^rank times the points it keeps, which at stride 2
# still costs less than the direct kernels' copy of every (sample, channel) plane.
DEPTHWISE_MAX_STRIDE = 2


def depthwise_forward(img, w, bias, geom, nt):
    """conv_forward on the in-place depthwise kernel (any channels per group on the image side,
    which the stride-1 data gradient needs; one in the forward convolutions routed here)."""
    n = img.shape[0]
    out = np.empty((n, geom.col_channels) + tuple(geom.col_spatial), dtype=img.dtype)
    _depthwise.forward(img.reshape(-1), w.reshape(-1), _NO_BIAS[img.dtype] if bias is None else bias,
                       out.reshape(-1), geo_array(geom), n, nt)
    return out


def depthwise_data_grad(cols, w, bias, geom, nt):
    """The stride-1 data gradient: the depthwise kernel on the columns with the flipped weight
    (multiplier M: M column channels per group summed into each image channel)."""
    return depthwise_forward(cols, flipped_weight(w, geom), bias, transposed_geometry(geom), nt)


def depthwise_weight_grad(cols, img, w_shape, geom, nt):
    """conv_weight_grad on the depthwise kernel: items (channel, sample chunk), chunks only as
    small as an even schedule needs; per-thread accumulators, summed at the end."""
    n = img.shape[0]
    chunks = min(n, -(-DEPTHWISE_ITEMS_PER_THREAD * nt // geom.col_channels))
    acc = np.zeros((nt, numel(w_shape)), dtype=img.dtype)
    _depthwise.weight_grad(cols.reshape(-1), img.reshape(-1), acc, geo_array(geom), n, -(-n // chunks), nt)
    if nt == 1:
        return acc[0].reshape(w_shape)
    dw = np.empty(w_shape, dtype=img.dtype)
    _conv.sum_rows(acc, dw.reshape(-1), nt)
    return dw


@bounded_cache("cpu conv unit_stride_geometry")
def unit_stride_geometry(geom):
    """The stride-1 geometry with geom's image, kernel, dilations and pads: its column point
    o * stride is geom's column point o, for every o of geom's columns."""
    cols = tuple(i + b + e - d * (k - 1) for i, b, e, d, k in
                 zip(geom.img_spatial, geom.pads_begin, geom.pads_end, geom.dilations, geom.kernel))
    return dataclasses.replace(geom, col_spatial=cols, strides=(1,) * geom.rank)


@functools.lru_cache(maxsize=256)
def _grid_dims(geom, unit):
    """conv_depthwise's dims of geom's columns on the stride-1 grid of `unit` (read-only, kept
    per geometry)."""
    r = geom.rank
    dims = np.array(three_axes(unit.col_spatial, 1, r) + three_axes(geom.col_spatial, 1, r)
                    + three_axes(geom.strides, 1, r), dtype=np.int64)
    dims.flags.writeable = False
    return dims


def depthwise_strided_forward(img, w, bias, geom, nt):
    """conv_forward of a strided depthwise convolution: the stride-1 one, subsampled."""
    unit = unit_stride_geometry(geom)
    full = depthwise_forward(img, w, bias, unit, nt)
    out = np.empty((img.shape[0], geom.col_channels) + tuple(geom.col_spatial), dtype=img.dtype)
    _depthwise.gather_grid(full.reshape(out.shape[0] * out.shape[1], -1), out.reshape(out.shape[0] * out.shape[1], -1),
                           _grid_dims(geom, unit), nt)
    return out


def _upsampled(cols, geom, unit, nt):
    """geom's columns placed on the stride-1 grid of `unit`, zeros between them."""
    full = np.empty(cols.shape[:2] + tuple(unit.col_spatial), dtype=cols.dtype)
    planes = cols.shape[0] * cols.shape[1]
    _depthwise.scatter_grid(cols.reshape(planes, -1), full.reshape(planes, -1), _grid_dims(geom, unit), nt)
    return full


def depthwise_strided_data_grad(cols, w, bias, geom, nt):
    """conv_data_grad of a strided depthwise convolution: the stride-1 one of the columns
    upsampled with zeros (the points the stride skips contribute nothing)."""
    unit = unit_stride_geometry(geom)
    return depthwise_data_grad(_upsampled(cols, geom, unit, nt), w, bias, unit, nt)


def depthwise_strided_weight_grad(cols, img, w_shape, geom, nt):
    """conv_weight_grad of a strided depthwise convolution, on the upsampled columns."""
    unit = unit_stride_geometry(geom)
    return depthwise_weight_grad(_upsampled(cols, geom, unit, nt), img, w_shape, unit, nt)


# --------------------------------------------------------------------------- one-point planes
# A "rows" convolution is one product over the batch's rows; blas.gemm runs the small ones in
# plain loops, cheaper than a BLAS call and its thread guard.
def rows_forward(img, w, bias, geom):
    """conv_forward of a "rows" convolution: Y (N, M) = X (N, C) W^T (+ bias)."""
    n = img.shape[0]
    y = blas_gemm(img.reshape(n, -1), w.reshape(w.shape[0], -1), trans_b=True, bias=bias)
    return y.reshape((n, geom.col_channels) + tuple(geom.col_spatial))


def rows_data_grad(cols, w, bias, geom):
    """conv_data_grad of a "rows" convolution: dX (N, C) = dY (N, M) W (+ bias)."""
    n = cols.shape[0]
    dx = blas_gemm(cols.reshape(n, -1), w.reshape(w.shape[0], -1), bias=bias)
    return dx.reshape((n, geom.img_channels) + tuple(geom.img_spatial))


def rows_weight_grad(cols, img, w_shape, geom):
    """conv_weight_grad of a "rows" convolution: dW (M, C) = dY^T (M, N) X (N, C)."""
    n = img.shape[0]
    return blas_gemm(cols.reshape(n, -1), img.reshape(n, -1), trans_a=True).reshape(w_shape)


# --------------------------------------------------------------------------- primitives
@functools.lru_cache(maxsize=256)
def route(geom, n, nt):
    """"depthwise" for stride-1 convolutions with one image channel per group and at most
    DEPTHWISE_MAX_MULTIPLIER column channels per group, "depthwise_strided" for those with
    strides up to DEPTHWISE_MAX_STRIDE and no negative pad; "rows" for 1x1 convolutions of one
    group on planes of one point; else "direct" for every convolution but 1x1 ones (plain
    GEMMs, for BLAS) and batches too small to give each thread a (sample, group) item; else
    "gemm"."""
    g = geom.group
    if g == 1 and geom.is_pointwise and numel(geom.img_spatial) == 1:
        return "rows"
    if n > 0 and geom.img_channels == g and geom.col_channels <= DEPTHWISE_MAX_MULTIPLIER * g:
        if all(s == 1 for s in geom.strides):
            return "depthwise"
        if all(s <= DEPTHWISE_MAX_STRIDE for s in geom.strides) and min(geom.pads) >= 0:
            return "depthwise_strided"
    direct = not geom.is_pointwise and n > 0 and (nt == 1 or n * geom.group >= nt)
    return "direct" if direct else "gemm"


@functools.lru_cache(maxsize=256)
def _gemm_plan(geom, n, per_tile, nt, dtype):
    """(geometry array, tile width, OpenMP-over-items?, scratch rows, scratch size) of the GEMM
    path, the work items being (sample, group, tile) when `per_tile`, else (sample, group); kept
    per key, as a step runs the same convolutions every time (the array is only read)."""
    t = _tile(geom, np.dtype(dtype).itemsize)
    items = n * geom.group * (-(-numel(geom.col_spatial) // t) if per_tile else 1)
    parallel = _schedule(items, nt)
    k = geom.img_channels // geom.group * numel(geom.kernel)
    geo = geo_array(geom)
    geo.flags.writeable = False
    return geo, t, parallel, nt if parallel else 1, 0 if geom.is_pointwise else k * t


def _gemm_setup(geom, n, per_tile, nt, dtype):
    """(geometry array, tile width, OpenMP-over-items?, im2col scratch) for the GEMM path."""
    geo, t, parallel, rows, size = _gemm_plan(geom, n, per_tile, nt, np.dtype(dtype))
    return geo, t, parallel, _scratch(rows, size, dtype)


def gemm_forward(img, w, bias, geom, nt):
    """conv_forward by im2col tiles and GEMM, items (sample, group, tile)."""
    n = img.shape[0]
    out = np.empty((n, geom.col_channels) + tuple(geom.col_spatial), dtype=img.dtype)
    if out.size == 0:
        return out
    geo, t, parallel, scratch = _gemm_setup(geom, n, True, nt, img.dtype)
    with blas_threads(1 if parallel else nt):
        _conv.forward(img.reshape(-1), w.reshape(-1), _NO_BIAS[img.dtype] if bias is None else bias,
                      out.reshape(-1), geo, n, t, scratch, parallel, nt)
    return out


def gemm_data_grad(cols, w, bias, geom, nt):
    """conv_data_grad by GEMM and col2im, items (sample, group); at stride 1 the convolution of
    cols with the flipped, transposed weight instead (im2col of cols, a deeper product)."""
    if all(s == 1 for s in geom.strides):
        return gemm_forward(cols, flipped_weight(w, geom), bias, transposed_geometry(geom), nt)
    n = cols.shape[0]
    out = np.empty((n, geom.img_channels) + tuple(geom.img_spatial), dtype=cols.dtype)
    if out.size == 0:
        return out
    geo, t, parallel, scratch = _gemm_setup(geom, n, False, nt, cols.dtype)
    with blas_threads(1 if parallel else nt):
        _conv.backward_data(cols.reshape(-1), w.reshape(-1), _NO_BIAS[cols.dtype] if bias is None else bias,
                            out.reshape(-1), geo, n, t, scratch, parallel, nt)
    return out


def gemm_weight_grad(cols, img, w_shape, geom, nt):
    """conv_weight_grad by im2col tiles and GEMM; per-thread accumulators when parallel."""
    n = img.shape[0]
    geo, t, parallel, scratch = _gemm_setup(geom, n, True, nt, img.dtype)
    acc = np.zeros((nt if parallel else 1, numel(w_shape)), dtype=img.dtype)
    with blas_threads(1 if parallel else nt):
        _conv.backward_weight(cols.reshape(-1), img.reshape(-1), acc, geo, n, t, scratch, parallel, nt)
    if not parallel:
        return acc.reshape(w_shape)
    dw = np.empty(w_shape, dtype=img.dtype)
    _conv.sum_rows(acc, dw.reshape(-1), nt)
    return dw


def flipped_weight(w, geom):
    """W (G*M, C, *k) as the weight of the stride-1 data-gradient convolution: (G*C, M, *k),
    spatially flipped."""
    g = geom.group
    m, c = geom.col_channels // g, geom.img_channels // g
    k = tuple(geom.kernel)
    wg = w.reshape((g, m, c) + k).swapaxes(1, 2)
    wg = wg[(Ellipsis,) + (slice(None, None, -1),) * len(k)]
    return np.ascontiguousarray(wg).reshape((g * c, m) + k)


@functools.lru_cache(maxsize=256)
def blas_dims(geom):
    """(what, size) of a GEMM-route convolution's BLAS dimensions, kept per geometry: the
    channels per group, the im2col depth of either side (channels per group x kernel taps; the
    stride-1 data gradient convolves the other way) and the planes of both sides, which are also
    leading dimensions."""
    g, taps = geom.group, numel(geom.kernel)
    return (("output channels per group", geom.col_channels // g),
            ("im2col depth (input channels per group x kernel taps)", geom.img_channels // g * taps),
            ("transposed im2col depth (output channels per group x kernel taps)", geom.col_channels // g * taps),
            ("column plane", numel(geom.col_spatial)), ("image plane", numel(geom.img_spatial)))


def check_blas_dims(geom, who):
    """Refuse, naming the op and the size, a GEMM-route convolution with a BLAS dimension
    (blas_dims) beyond BLAS's 32-bit ints."""
    for name, size in blas_dims(geom):
        if size > BLAS_INT_MAX:
            raise ShapeError(f"{who}: the {name} is {size}, beyond the {BLAS_INT_MAX} that BLAS's 32-bit "
                             f"dimensions hold on the GEMM route of this convolution")


@functools.lru_cache(maxsize=256)
def has_points(geom):
    """(image side, column side): whether each side's planes hold any point."""
    return numel(geom.img_spatial) > 0, numel(geom.col_spatial) > 0


def without_terms(shape, bias, dtype):
    """A convolution's result where its sums have no terms (no channels on the side it reads):
    the bias along axis 1, else zeros, as ONNX's reference gives."""
    out = np.zeros(shape, dtype=dtype)
    if bias is not None and out.size:
        out += bias.reshape((-1,) + (1,) * (len(shape) - 2))
    return out


def conv_forward(img, w, bias, geom, who, nt, path):
    """Columns (N, col_channels, *col_spatial) of W (*) img, plus bias when given; `path` is
    route(geom, N, nt)."""
    if geom.img_channels == 0 or not (img.shape[0] and geom.col_channels and has_points(geom)[1]):
        return without_terms((img.shape[0], geom.col_channels) + tuple(geom.col_spatial), bias, img.dtype)
    if path == "depthwise":
        return depthwise_forward(img, w, bias, geom, nt)
    if path == "depthwise_strided":
        return depthwise_strided_forward(img, w, bias, geom, nt)
    if path == "direct":
        return direct_forward(img, w, bias, geom, nt)
    check_blas_dims(geom, who)
    if path == "rows":
        return rows_forward(img, w, bias, geom)
    return gemm_forward(img, w, bias, geom, nt)


def conv_data_grad(cols, w, bias, geom, who, nt, path):
    """Image (N, img_channels, *img_spatial) = W^T (*) cols, plus bias when given; `path` is
    route(geom, N, nt)."""
    if geom.col_channels == 0 or not (cols.shape[0] and geom.img_channels and has_points(geom)[0]):
        return without_terms((cols.shape[0], geom.img_channels) + tuple(geom.img_spatial), bias, cols.dtype)
    if path == "depthwise":
        return depthwise_data_grad(cols, w, bias, geom, nt)
    if path == "depthwise_strided":
        return depthwise_strided_data_grad(cols, w, bias, geom, nt)
    if path == "direct":
        return direct_data_grad(cols, w, bias, geom, nt)
    check_blas_dims(geom, who)
    if path == "rows":
        return rows_data_grad(cols, w, bias, geom)
    return gemm_data_grad(cols, w, bias, geom, nt)


def conv_weight_grad(cols, img, w_shape, geom, who, nt, path):
    """dW (w_shape) = sum over the batch of cols . im2col(img)^T; `path` is route(geom, N, nt)."""
    if img.shape[0] == 0 or cols.size == 0:
        return np.zeros(w_shape, dtype=img.dtype)
    if path == "depthwise":
        return depthwise_weight_grad(cols, img, w_shape, geom, nt)
    if path == "depthwise_strided":
        return depthwise_strided_weight_grad(cols, img, w_shape, geom, nt)
    if path == "direct":
        return direct_weight_grad(cols, img, w_shape, geom, nt)
    check_blas_dims(geom, who)
    if path == "rows":
        return rows_weight_grad(cols, img, w_shape, geom)
    return gemm_weight_grad(cols, img, w_shape, geom, nt)


def bias_grad(dy, nt=None):
    """dB[c] = sum of dy over the batch and spatial axes (on nt threads, default kernel_threads())."""
    out = np.empty(dy.shape[1], dtype=dy.dtype)
    if dy.size == 0:
        out[:] = 0
        return out
    _conv.channel_sums(dy.reshape(dy.shape[0], dy.shape[1], -1), out, kernel_threads() if nt is None else nt)
    return out


# --------------------------------------------------------------------------- kernels
def conv_kernel(ctx):
    x, w = ctx.inputs[0], ctx.inputs[1]
    b = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    who = ctx.who
    geom = geometry_for("conv", who, x.shape, w.shape, ctx.attrs, ctx.frozen_attrs())
    nt = kernel_threads()
    return {"Y": conv_forward(x, w, b, geom, who, nt, route(geom, x.shape[0], nt))}


def conv_transpose_kernel(ctx):
    x, w = ctx.inputs[0], ctx.inputs[1]
    b = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    who = ctx.who
    geom = geometry_for("transpose", who, x.shape, w.shape, ctx.attrs, ctx.frozen_attrs())
    nt = kernel_threads()
    return {"Y": conv_data_grad(x, w, b, geom, who, nt, route(geom, x.shape[0], nt))}


def conv_grad_kernel(ctx):
    dy, x, w = ctx.inputs
    who = ctx.who
    geom = geometry_for("conv", who, x.shape, w.shape, ctx.attrs, ctx.frozen_attrs())
    nt = kernel_threads()
    path = route(geom, x.shape[0], nt)
    out = {}
    if ctx.wants("dB"):
        out["dB"] = bias_grad(dy, nt)
    cols = dy
    if (ctx.wants("dX") or ctx.wants("dW")) and path == "depthwise_strided":
        # the gradients of the stride-1 convolution at dY placed on its grid: placed there once
        unit = unit_stride_geometry(geom)
        cols, geom = _upsampled(dy, geom, unit, nt), unit
        path = route(geom, x.shape[0], nt)
    if ctx.wants("dX"):
        out["dX"] = conv_data_grad(cols, w, None, geom, who, nt, path)
    if ctx.wants("dW"):
        out["dW"] = conv_weight_grad(cols, x, w.shape, geom, who, nt, path)
    return out


def conv_transpose_grad_kernel(ctx):
    dy, x, w = ctx.inputs
    who = ctx.who
    geom = geometry_for("transpose", who, x.shape, w.shape, ctx.attrs, ctx.frozen_attrs())
    nt = kernel_threads()
    path = route(geom, x.shape[0], nt)
    out = {}
    if ctx.wants("dX"):
        out["dX"] = conv_forward(dy, w, None, geom, who, nt, path)
    if ctx.wants("dW"):
        out["dW"] = conv_weight_grad(x, dy, w.shape, geom, who, nt, path)
    if ctx.wants("dB"):
        out["dB"] = bias_grad(dy, nt)
    return out


_FLOATS = (np.float32, np.float64)
register_kernel("Conv", since=1, end=10, dtypes=_FLOATS)(conv_kernel)
register_kernel("Conv", since=11, dtypes=_FLOATS)(conv_kernel)
register_kernel("ConvTranspose", since=1, end=10, dtypes=_FLOATS)(conv_transpose_kernel)
register_kernel("ConvTranspose", since=11, dtypes=_FLOATS)(conv_transpose_kernel)
register_kernel("ConvGrad", domain=MS_DOMAIN, dtypes=_FLOATS)(conv_grad_kernel)
register_kernel("ConvTransposeGrad", domain=MS_DOMAIN, dtypes=_FLOATS)(conv_transpose_grad_kernel)
