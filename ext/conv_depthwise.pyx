# cython: language_level=3
"""Direct convolution loops for one image channel per group (C == 1): depthwise convolutions
(group == channels, any channel multiplier M) and single-channel inputs, where im2col + GEMM
would be a stack of tiny products.

Geometry `geo` as in conv.pyx: [G, C, M, ID, IH, IW, OD, OH, OW, KD, KH, KW, SD, SH, SW, DD,
DH, DW, PD, PH, PW].  Each image plane is first copied into a zero-padded per-thread scratch
plane of extent E = (O - 1) * S + (K - 1) * D + 1 per axis (scratch index e is image index
e - P), so that the inner loops run without bounds checks and, at stride 1, vectorize.
"""
from cython.parallel cimport prange, threadid
from libc.string cimport memset, memcpy

ctypedef fused real:
    float
    double


cdef struct Geo:
    Py_ssize_t G, C, M
    Py_ssize_t ID, IH, IW, OD, OH, OW
    Py_ssize_t KD, KH, KW, SD, SH, SW, DD, DH, DW, PD, PH, PW
    Py_ssize_t ED, EH, EW, img, col, taps


cdef Geo _geo(const long long[::1] g):
    cdef Geo r
    r.G, r.C, r.M = g[0], g[1], g[2]
    r.ID, r.IH, r.IW, r.OD, r.OH, r.OW = g[3], g[4], g[5], g[6], g[7], g[8]
    r.KD, r.KH, r.KW, r.SD, r.SH, r.SW = g[9], g[10], g[11], g[12], g[13], g[14]
    r.DD, r.DH, r.DW, r.PD, r.PH, r.PW = g[15], g[16], g[17], g[18], g[19], g[20]
    r.ED = (r.OD - 1) * r.SD + (r.KD - 1) * r.DD + 1
    r.EH = (r.OH - 1) * r.SH + (r.KH - 1) * r.DH + 1
    r.EW = (r.OW - 1) * r.SW + (r.KW - 1) * r.DW + 1
    r.img = r.ID * r.IH * r.IW
    r.col = r.OD * r.OH * r.OW
    r.taps = r.KD * r.KH * r.KW
    return r


def padded_size(const long long[::1] geo):
    """Elements of one padded scratch plane."""
    cdef Geo g = _geo(geo)
    return g.ED * g.EH * g.EW


cdef void pad_plane(const real* src, real* dst, const Geo* g) noexcept nogil:
    """dst (ED, EH, EW) = the image plane src, shifted by the begin pads, zero elsewhere."""
    cdef Py_ssize_t ed, eh, idd, ih, lo, hi
    cdef real* row
    lo = g.PW
    hi = g.PW + g.IW
    if lo < 0:
        lo = 0
    if hi > g.EW:
        hi = g.EW
    for ed in range(g.ED):
        idd = ed - g.PD
        for eh in range(g.EH):
            ih = eh - g.PH
            row = dst + (ed * g.EH + eh) * g.EW
            if idd < 0 or idd >= g.ID or ih < 0 or ih >= g.IH or hi <= lo:
                memset(row, 0, g.EW * sizeof(real))
                continue
            if lo > 0:
                memset(row, 0, lo * sizeof(real))
            memcpy(row + lo, src + (idd * g.IH + ih) * g.IW + (lo - g.PW), (hi - lo) * sizeof(real))
            if hi < g.EW:
                memset(row + hi, 0, (g.EW - hi) * sizeof(real))


cdef void unpad_plane(const real* src, real* dst, const Geo* g) noexcept nogil:
    """The image plane dst = the padded plane src where they overlap, zero elsewhere."""
    cdef Py_ssize_t idd, ih, ed, eh, lo, hi
    cdef real* row
    lo = -g.PW
    hi = g.EW - g.PW
    if lo < 0:
        lo = 0
    if hi > g.IW:
        hi = g.IW
    for idd in range(g.ID):
        ed = idd + g.PD
        for ih in range(g.IH):
            eh = ih + g.PH
            row = dst + (idd * g.IH + ih) * g.IW
            if ed < 0 or ed >= g.ED or eh < 0 or eh >= g.EH or hi <= lo:
                memset(row, 0, g.IW * sizeof(real))
                continue
            if lo > 0:
                memset(row, 0, lo * sizeof(real))
            memcpy(row + lo, src + (ed * g.EH + eh) * g.EW + lo + g.PW, (hi - lo) * sizeof(real))
            if hi < g.IW:
                memset(row + hi, 0, (g.IW - hi) * sizeof(real))


def forward(const real[::1] x, const real[::1] w, const real[::1] bias, real[::1] y,
            const long long[::1] geo, Py_ssize_t N, real[:, ::1] scratch, int num_threads):
    """y[n, g*M + m] = sum over taps of w[g*M + m] * x[n, g] (shifted) [+ bias]."""
    cdef Geo g = _geo(geo)
    cdef Py_ssize_t it, n, gi, m, od, oh, ow, kd, kh, kw
    cdef bint has_bias = bias.shape[0] > 0
    cdef real* pad
    cdef real* yrow
    cdef const real* prow
    cdef const real* wm
    cdef real wv, bv
    for it in prange(N * g.G, nogil=True, schedule="static", num_threads=num_threads):
        gi = it % g.G
        n = it // g.G
        pad = &scratch[threadid(), 0]
        pad_plane(&x[0] + it * g.img, pad, &g)
        for m in range(g.M):
            wm = &w[0] + (gi * g.M + m) * g.taps
            bv = bias[gi * g.M + m] if has_bias else 0
            for od in range(g.OD):
                for oh in range(g.OH):
                    yrow = &y[0] + ((it * g.M + m) * g.OD * g.OH + od * g.OH + oh) * g.OW
                    for ow in range(g.OW):
                        yrow[ow] = bv
                    for kd in range(g.KD):
                        for kh in range(g.KH):
                            prow = pad + ((od * g.SD + kd * g.DD) * g.EH + oh * g.SH + kh * g.DH) * g.EW
                            for kw in range(g.KW):
                                wv = wm[(kd * g.KH + kh) * g.KW + kw]
                                if g.SW == 1:
                                    for ow in range(g.OW):
                                        yrow[ow] += wv * prow[ow + kw * g.DW]
                                else:
                                    for ow in range(g.OW):
                                        yrow[ow] += wv * prow[ow * g.SW + kw * g.DW]


def backward_data(const real[::1] dy, const real[::1] w, real[::1] dx,
                  const long long[::1] geo, Py_ssize_t N, real[:, ::1] scratch, int num_threads):
    """dx[n, g] = sum over m and taps of w[g*M + m] * dy[n, g*M + m], scattered back."""
    cdef Geo g = _geo(geo)
    cdef Py_ssize_t it, m, od, oh, ow, kd, kh, kw, esize = g.ED * g.EH * g.EW
    cdef real* pad
    cdef real* prow
    cdef const real* dyrow
    cdef const real* wm
    cdef real wv
    for it in prange(N * g.G, nogil=True, schedule="static", num_threads=num_threads):
        pad = &scratch[threadid(), 0]
        memset(pad, 0, esize * sizeof(real))
        for m in range(g.M):
            wm = &w[0] + ((it % g.G) * g.M + m) * g.taps
            for od in range(g.OD):
                for oh in range(g.OH):
                    dyrow = &dy[0] + ((it * g.M + m) * g.OD * g.OH + od * g.OH + oh) * g.OW
                    for kd in range(g.KD):
                        for kh in range(g.KH):
                            prow = pad + ((od * g.SD + kd * g.DD) * g.EH + oh * g.SH + kh * g.DH) * g.EW
                            for kw in range(g.KW):
                                wv = wm[(kd * g.KH + kh) * g.KW + kw]
                                if g.SW == 1:
                                    for ow in range(g.OW):
                                        prow[ow + kw * g.DW] += wv * dyrow[ow]
                                else:
                                    for ow in range(g.OW):
                                        prow[ow * g.SW + kw * g.DW] += wv * dyrow[ow]
        unpad_plane(pad, &dx[0] + it * g.img, &g)


def backward_weight(const real[::1] dy, const real[::1] x, real[::1] dw,
                    const long long[::1] geo, Py_ssize_t N, real[:, ::1] scratch,
                    double[:, ::1] acc, int num_threads):
    """dw[g*M + m, taps] = sum over n and columns of dy[n, g*M + m] * x[n, g] (shifted).
    Items are output channels, so no two threads write the same dw entry; acc is a per-thread
    double accumulator of `taps` entries."""
    cdef Geo g = _geo(geo)
    cdef Py_ssize_t oc, n, gi, od, oh, ow, kd, kh, kw, tap
    cdef int tid
    cdef real* pad
    cdef const real* prow
    cdef const real* dyrow
    cdef double* a
    cdef real s
    for oc in prange(g.G * g.M, nogil=True, schedule="static", num_threads=num_threads):
        tid = threadid()
        gi = oc // g.M
        pad = &scratch[tid, 0]
        a = &acc[tid, 0]
        for tap in range(g.taps):
            a[tap] = 0
        for n in range(N):
            pad_plane(&x[0] + (n * g.G + gi) * g.img, pad, &g)
            for od in range(g.OD):
                for oh in range(g.OH):
                    dyrow = &dy[0] + ((n * g.G * g.M + oc) * g.OD * g.OH + od * g.OH + oh) * g.OW
                    for kd in range(g.KD):
                        for kh in range(g.KH):
                            prow = pad + ((od * g.SD + kd * g.DD) * g.EH + oh * g.SH + kh * g.DH) * g.EW
                            for kw in range(g.KW):
                                s = 0
                                if g.SW == 1:
                                    for ow in range(g.OW):
                                        s = s + dyrow[ow] * prow[ow + kw * g.DW]
                                else:
                                    for ow in range(g.OW):
                                        s = s + dyrow[ow] * prow[ow * g.SW + kw * g.DW]
                                a[(kd * g.KH + kh) * g.KW + kw] += s
        for tap in range(g.taps):
            dw[oc * g.taps + tap] = <real>a[tap]
