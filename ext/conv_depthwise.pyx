# cython: language_level=3
"""Depthwise convolution at stride 1, read in place: one image channel per group (Conv with
group == C_in, any multiplier M = C_out / group; minitrain/providers/cpu/conv.py routes M <= 2
here), 1D, 2D and 3D, any kernel, pads and dilation.

The direct kernels (conv_direct.pyx) copy the image into a padded grid and crop the outputs
back; with one channel per group there is too little arithmetic per point to pay for those two
passes over memory.  Here each output row is built in registers from the image rows it reads
(vectors of VW columns, the lanes outside the image masked to zero at the row ends, rows outside
the image skipped) and stored straight into Y, bias included (ext/conv_depthwise.h).

  forward      Y[n, g*M + m] = b + sum over c < C, taps of W[g*M + m, c, tap] * X[n, g*C + c] shifted
               (Conv: C = 1; the stride-1 data gradient is this with C = M, the columns as
               image and the flipped weight: minitrain/providers/cpu/conv.py)
  weight_grad  dW[g*M + m, 0, tap] = sum over n, o of dY[n, g*M + m, o] * X[n, g, o shifted by tap]

The geometry is conv.pyx's int64 array `geo` (G, C, M, image dims, column dims, kernel, strides,
dilations, begin pads); the strides must be 1.
"""
from cython.parallel cimport prange, threadid
from libc.stdint cimport uintptr_t
from libc.string cimport memset

import numpy as np

include "thresholds.pxi"

ctypedef fused real:
    float
    double

cdef extern from "conv_depthwise.h":
    ctypedef struct mt_dw_geom:
        Py_ssize_t G, C, M, ID, IH, IW, OD, OH, OW, KD, KH, KW, DD, DH, DW, PD, PH, PW
    ctypedef struct mt_dw_mask_f:
        pass
    ctypedef struct mt_dw_mask_d:
        pass
    void mt_dw_masks_f(const mt_dw_geom* g, mt_dw_mask_f* masks) noexcept nogil
    void mt_dw_masks_d(const mt_dw_geom* g, mt_dw_mask_d* masks) noexcept nogil
    size_t mt_dw_mask_bytes(int is_double)
    void mt_dw_forward_plane_f(const mt_dw_geom* g, const mt_dw_mask_f* masks, const float* x, Py_ssize_t xstride,
                               const float* w, float bias, float* y) noexcept nogil
    void mt_dw_forward_plane_d(const mt_dw_geom* g, const mt_dw_mask_d* masks, const double* x, Py_ssize_t xstride,
                               const double* w, double bias, double* y) noexcept nogil
    ctypedef struct mt_dw_vf:
        pass
    ctypedef struct mt_dw_vd:
        pass
    void mt_dw_weight_grad_f(const mt_dw_geom* g, const mt_dw_mask_f* masks, const float* dy, Py_ssize_t dystride,
                             const float* x, Py_ssize_t xstride, Py_ssize_t nb, float* out,
                             mt_dw_vf* lanes) noexcept nogil
    void mt_dw_weight_grad_d(const mt_dw_geom* g, const mt_dw_mask_d* masks, const double* dy, Py_ssize_t dystride,
                             const double* x, Py_ssize_t xstride, Py_ssize_t nb, double* out,
                             mt_dw_vd* lanes) noexcept nogil
    Py_ssize_t mt_dw_mask_count(const mt_dw_geom* g, int is_double)
    int mt_dw_vbytes()


cdef mt_dw_geom _geom(const long long[::1] geo) except *:
    """The geometry of `geo`, checked: stride 1, and sizes that are not negative."""
    cdef mt_dw_geom g
    cdef Py_ssize_t i
    if geo.shape[0] != 21:
        raise ValueError(f"conv_depthwise: the geometry has {geo.shape[0]} entries, not 21")
    if geo[12] != 1 or geo[13] != 1 or geo[14] != 1:
        raise ValueError(f"conv_depthwise: strides ({geo[12]}, {geo[13]}, {geo[14]}) are not 1")
    for i in range(18):
        if geo[i] < 0 or (i < 3 and geo[i] == 0) or (9 <= i < 12 and geo[i] == 0):
            raise ValueError(f"conv_depthwise: geometry entry {i} is {geo[i]}")
    g.G, g.C, g.M = geo[0], geo[1], geo[2]
    g.ID, g.IH, g.IW, g.OD, g.OH, g.OW = geo[3], geo[4], geo[5], geo[6], geo[7], geo[8]
    g.KD, g.KH, g.KW = geo[9], geo[10], geo[11]
    g.DD, g.DH, g.DW, g.PD, g.PH, g.PW = geo[15], geo[16], geo[17], geo[18], geo[19], geo[20]
    return g


cdef class _Aligned:
    """`nbytes` of scratch starting on a 64-byte boundary (`start`)."""
    cdef object buffer
    cdef char* start

    def __cinit__(self, Py_ssize_t nbytes):
        self.buffer = np.empty(nbytes + 64, dtype=np.uint8)
        cdef unsigned char[::1] view = self.buffer
        self.start = <char*>&view[0] + ((-<uintptr_t>&view[0]) % 64)


cdef _Aligned _masks(const mt_dw_geom* g, bint is_double):
    """The lane masks of a call (mt_dw_masks_*), aligned for the masks' vector type."""
    masks = _Aligned(mt_dw_mask_count(g, is_double) * mt_dw_mask_bytes(is_double))
    if is_double:
        mt_dw_masks_d(g, <mt_dw_mask_d*>masks.start)
    else:
        mt_dw_masks_f(g, <mt_dw_mask_f*>masks.start)
    return masks


def forward(const real[::1] x, const real[::1] w, const real[::1] bias, real[::1] y, const long long[::1] geo,
            Py_ssize_t N, int num_threads):
    """Y (N, G*M, O...) from the image X (N, G*C, I...) and W (G*M, C, K...), plus `bias` (G*M)
    unless it is empty; OpenMP over the output planes."""
    cdef mt_dw_geom g = _geom(geo)
    cdef Py_ssize_t img = g.ID * g.IH * g.IW, col = g.OD * g.OH * g.OW, taps = g.KD * g.KH * g.KW
    cdef Py_ssize_t channels = g.G * g.M, planes = N * channels, item, n, co
    if (x.shape[0] != N * g.G * g.C * img or w.shape[0] != channels * g.C * taps or y.shape[0] != planes * col
            or bias.shape[0] not in (0, channels)):
        raise ValueError("conv_depthwise.forward: the buffers disagree with the geometry")
    if planes == 0 or col == 0:
        return
    cdef _Aligned masks = _masks(&g, real is double)
    cdef int nt = threads_for(planes * col * g.C * taps, num_threads, MT_MIN_PARALLEL_DEPTHWISE_MACS)
    for item in prange(planes, nogil=True, schedule="static", num_threads=nt):
        n = item // channels
        co = item - n * channels
        if real is float:
            mt_dw_forward_plane_f(&g, <mt_dw_mask_f*>masks.start, &x[(n * g.G + co // g.M) * g.C * img], img,
                                  &w[co * g.C * taps], bias[co] if bias.shape[0] else 0, &y[item * col])
        else:
            mt_dw_forward_plane_d(&g, <mt_dw_mask_d*>masks.start, &x[(n * g.G + co // g.M) * g.C * img], img,
                                  &w[co * g.C * taps], bias[co] if bias.shape[0] else 0, &y[item * col])


def weight_grad(const real[::1] dy, const real[::1] x, real[:, ::1] acc, const long long[::1] geo, Py_ssize_t N,
                Py_ssize_t chunk, int num_threads):
    """Adds dW (G*M, 1, K...) into the rows of `acc` (one per thread; the caller sums them), from
    dY (N, G*M, O...) and the image X (N, G, I...); work items (channel, chunk of `chunk`
    samples), OpenMP over them."""
    cdef mt_dw_geom g = _geom(geo)
    cdef Py_ssize_t img = g.ID * g.IH * g.IW, col = g.OD * g.OH * g.OW, taps = g.KD * g.KH * g.KW
    cdef Py_ssize_t channels = g.G * g.M, chunks, items, item, co, n0
    if g.C != 1:
        raise ValueError(f"conv_depthwise.weight_grad: {g.C} image channels per group, not 1")
    if chunk < 1 or dy.shape[0] != N * channels * col or x.shape[0] != N * g.G * img or acc.shape[1] != channels * taps:
        raise ValueError("conv_depthwise.weight_grad: the buffers disagree with the geometry")
    if N == 0 or col == 0:
        return
    chunks = (N + chunk - 1) // chunk
    items = chunks * channels
    cdef _Aligned masks = _masks(&g, real is double)
    cdef int nt = min(acc.shape[0], threads_for(N * channels * col * taps, num_threads, MT_MIN_PARALLEL_DEPTHWISE_MACS))
    # per thread: taps vectors of lane sums (for kernels whose sizes are not compiled in), each
    # thread's block on a 64-byte boundary
    cdef Py_ssize_t block = (taps * mt_dw_vbytes() + 63) // 64 * 64
    cdef _Aligned lanes = _Aligned(nt * block)
    for item in prange(items, nogil=True, schedule="static", num_threads=nt):
        co = item // chunks
        n0 = (item - co * chunks) * chunk
        if real is float:
            mt_dw_weight_grad_f(&g, <mt_dw_mask_f*>masks.start, &dy[(n0 * channels + co) * col], channels * col,
                                &x[(n0 * g.G + co // g.M) * img], g.G * img, min(chunk, N - n0), &acc[threadid(), co * taps],
                                <mt_dw_vf*>(lanes.start + threadid() * block))
        else:
            mt_dw_weight_grad_d(&g, <mt_dw_mask_d*>masks.start, &dy[(n0 * channels + co) * col], channels * col,
                                &x[(n0 * g.G + co // g.M) * img], g.G * img, min(chunk, N - n0), &acc[threadid(), co * taps],
                                <mt_dw_vd*>(lanes.start + threadid() * block))



cdef int _check_grid(Py_ssize_t planes_full, Py_ssize_t size_full, Py_ssize_t planes_part, Py_ssize_t size_part,
                     const long long[::1] dims) except -1:
    """dims (FD, FH, FW, OD, OH, OW, SD, SH, SW) fit both buffers, the points inside the grid."""
    if dims.shape[0] != 9 or planes_part != planes_full or size_full != dims[0] * dims[1] * dims[2] \
            or size_part != dims[3] * dims[4] * dims[5]:
        raise ValueError("conv_depthwise: the planes of the grids do not match their dims")
    for a in range(3):
        if dims[3 + a] < 1 or dims[6 + a] < 1 or (dims[3 + a] - 1) * dims[6 + a] >= dims[a]:
            raise ValueError("conv_depthwise: the sampled points lie outside the grid")
    return 0


def gather_grid(const real[:, ::1] full, real[:, ::1] part, const long long[::1] dims, int num_threads):
    """part[p, od, oh, ow] = full[p, od*SD, oh*SH, ow*SW]: the points at multiples of the strides
    of planes on the stride-1 grid (full: planes x FD*FH*FW, part: planes x OD*OH*OW; dims: FD,
    FH, FW, OD, OH, OW, SD, SH, SW), for the strided convolutions that conv.py runs on the
    stride-1 grid."""
    _check_grid(full.shape[0], full.shape[1], part.shape[0], part.shape[1], dims)
    cdef Py_ssize_t fh = dims[1], fw = dims[2], od = dims[3], oh = dims[4], ow = dims[5]
    cdef Py_ssize_t sd = dims[6], sh = dims[7], sw = dims[8], p, a, b, c, src, dst
    for p in prange(full.shape[0], nogil=True, schedule="static",
                    num_threads=threads_for(full.shape[0] * full.shape[1], num_threads, MT_MIN_PARALLEL_GATHER)):
        for a in range(od):
            for b in range(oh):
                src = (a * sd * fh + b * sh) * fw
                dst = (a * oh + b) * ow
                for c in range(ow):
                    part[p, dst + c] = full[p, src + c * sw]


def scatter_grid(const real[:, ::1] part, real[:, ::1] full, const long long[::1] dims, int num_threads):
    """The reverse of gather_grid: full[p, od*SD, oh*SH, ow*SW] = part[p, od, oh, ow], every
    other point of full zero."""
    _check_grid(full.shape[0], full.shape[1], part.shape[0], part.shape[1], dims)
    cdef Py_ssize_t fh = dims[1], fw = dims[2], od = dims[3], oh = dims[4], ow = dims[5]
    cdef Py_ssize_t sd = dims[6], sh = dims[7], sw = dims[8], p, a, b, c, src, dst
    for p in prange(full.shape[0], nogil=True, schedule="static",
                    num_threads=threads_for(full.shape[0] * full.shape[1], num_threads, MT_MIN_PARALLEL_GATHER)):
        memset(&full[p, 0], 0, full.shape[1] * sizeof(real))
        for a in range(od):
            for b in range(oh):
                dst = (a * sd * fh + b * sh) * fw
                src = (a * oh + b) * ow
                for c in range(ow):
                    full[p, dst + c * sw] = part[p, src + c]
