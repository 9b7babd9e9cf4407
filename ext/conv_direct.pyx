# cython: language_level=3
"""Direct convolution with SIMD register-blocked microkernels: no im2col, no GEMM packing.

The image of one (sample, group) is copied once into a "shifted grid" buffer: zero-padded,
split into stride phases (phase r of an axis holds padded positions u * S + r), each phase a
plane of U = (Ud, Uh, Uw) points.  Column position o = (od, oh, ow) then maps to grid position
p = (od * Uh + oh) * Uw + ow, and kernel tap k reads the buffer at p + off[k] with one constant
offset per tap (k * D = q * S + r per axis: phase r, shift q).  Grid positions with oh >= Oh or
ow >= Ow are garbage: computed and dropped (forward), or fed zeros (weight gradient).

The width-unrolled grid (plan field KU > 0) trades those garbage columns for a wider copy: image
channel c becomes KU grid channels (c, kw), each holding the columns ow * S + kw * D - P for
ow < Ow, and the B samples of an item sit side by side in every grid row (Uw = B * Ow).  The
taps left are those of the leading axes, whole-row shifts, so every grid point is an output.

  kernel A  y[m, p]  = sum over c, k of W[m, c, k] * x[c, p + off[k]]      (Conv forward, and the
            data gradient: per stride phase of the image, a correlation of dY with the taps
            that reach that phase; at stride 1 the convolution with the flipped weight)
  kernel B  dW[m, c, k] += sum over p of dy[m, p] * x[c, p + off[k]]     (weight gradient)

A's microkernel keeps an MR x (NV vectors) block of y in registers and broadcasts MR weights per
(c, k); B's keeps MR2 x TB dot products (TB taps of one channel) and reduces them at the end.
The SIMD width follows the compiler's target (AVX-512, AVX, else 128-bit) through GCC vector
extensions; float and double share the code.

`plan` is the byte buffer that ext/conv_plan.h lays out: an mt_conv_plan (the geometry; L the
buffer length per channel and sample, B the samples per work item), the stride phases of the
packed image, one mt_conv_sub record per sub-problem, then the tap offsets.  A convolution is
one sub-problem; the data gradient is one per stride phase of the image, all reading one packed
copy of the columns.  The C headers: conv_direct.h (microkernels), conv_plan.h (the plan).
"""
from cython.parallel cimport prange, threadid
from libc.stdint cimport int64_t
from libc.string cimport memset

ctypedef fused real:
    float
    double

cdef extern from "conv_direct.h":
    void mt_ka_call_float(int variant, const float* x, const Py_ssize_t* coff, Py_ssize_t nct, const float* wp,
                          float* y, Py_ssize_t ldy, Py_ssize_t p0, Py_ssize_t p1, Py_ssize_t mvalid) noexcept nogil
    void mt_ka_call_double(int variant, const double* x, const Py_ssize_t* coff, Py_ssize_t nct, const double* wp,
                           double* y, Py_ssize_t ldy, Py_ssize_t p0, Py_ssize_t p1, Py_ssize_t mvalid) noexcept nogil
    void mt_kb_call_float(int tb, const float* dy, Py_ssize_t ldd, const float* x, const Py_ssize_t* off,
                          Py_ssize_t nb, Py_ssize_t L, Py_ssize_t plen, float* out, Py_ssize_t ldo) noexcept nogil
    void mt_kb_call_double(int tb, const double* dy, Py_ssize_t ldd, const double* x, const Py_ssize_t* off,
                           Py_ssize_t nb, Py_ssize_t L, Py_ssize_t plen, double* out, Py_ssize_t ldo) noexcept nogil
    int mt_vbytes()
    void float_row_pack(float* row, const float* src, Py_ssize_t n, Py_ssize_t lo, Py_ssize_t hi,
                        Py_ssize_t stride) noexcept nogil
    void double_row_pack(double* row, const double* src, Py_ssize_t n, Py_ssize_t lo, Py_ssize_t hi,
                         Py_ssize_t stride) noexcept nogil
    void float_row_out(float* dst, const float* src, Py_ssize_t n, Py_ssize_t stride, float bias) noexcept nogil
    void float_zero(float* dst, Py_ssize_t n) noexcept nogil
    void float_row_pack2(float* r0, float* r1, const float* src, Py_ssize_t n, Py_ssize_t lo0, Py_ssize_t hi0,
                         Py_ssize_t lo1, Py_ssize_t hi1) noexcept nogil
    void double_row_pack2(double* r0, double* r1, const double* src, Py_ssize_t n, Py_ssize_t lo0,
                          Py_ssize_t hi0, Py_ssize_t lo1, Py_ssize_t hi1) noexcept nogil
    void double_zero(double* dst, Py_ssize_t n) noexcept nogil
    void double_row_out(double* dst, const double* src, Py_ssize_t n, Py_ssize_t stride, double bias) noexcept nogil
    void float_row_unroll(float* dst, Py_ssize_t dstride, const float* src, Py_ssize_t width, Py_ssize_t ku,
                          Py_ssize_t n, Py_ssize_t stride, Py_ssize_t dw, Py_ssize_t pad) noexcept nogil
    void double_row_unroll(double* dst, Py_ssize_t dstride, const double* src, Py_ssize_t width, Py_ssize_t ku,
                           Py_ssize_t n, Py_ssize_t stride, Py_ssize_t dw, Py_ssize_t pad) noexcept nogil
    int mt_a_mr_of(int v)
    int mt_a_nv_of(int v)
    int mt_b_rows_of(int v)
    int mt_b_tbmax_of(int v)


def simd_bytes():
    """Bytes of one SIMD vector in the microkernels (64: AVX-512, 32: AVX, 16: otherwise)."""
    return mt_vbytes()


def a_variants():
    """[(MR, NV)] of kernel A's microkernels, by variant index."""
    return [(mt_a_mr_of(v), mt_a_nv_of(v)) for v in range(5)]


def b_variants():
    """[(MR2, TBMAX)] of kernel B's three row blockings, by variant index."""
    return [(mt_b_rows_of(v), mt_b_tbmax_of(v)) for v in range(3)]


cdef extern from "conv_plan.h":
    ctypedef struct mt_conv_plan:
        int64_t G, C, M, Ud, Uh, Uw, L, B, nph, ID, IH, IW, SD, SH, SW, PD, PH, PW, nsub, noff, KU, OW, DW
    ctypedef struct mt_conv_sub:
        int64_t Od, Oh, Ow, Pext, taps, off_index, w_index, ycol, ysd, ysh, ysw, ybase
    ctypedef struct mt_conv_layout_t:
        const char* const* names
        const size_t* offsets
        size_t count, size
    mt_conv_layout_t mt_conv_layout(int which)


def plan_layout():
    """{"plan": ..., "sub": ...}: each (size in bytes, [(field, byte offset)]) of ext/conv_plan.h's
    mt_conv_plan and mt_conv_sub, as this build's compiler lays them out."""
    layouts = {}
    for which, name in enumerate(("plan", "sub")):
        lay = mt_conv_layout(which)
        layouts[name] = (lay.size, [(lay.names[i].decode(), lay.offsets[i]) for i in range(lay.count)])
    return layouts


cdef struct Plan:
    Py_ssize_t G, C, M, Ud, Uh, Uw, L, B, nph
    Py_ssize_t ID, IH, IW, SD, SH, SW, PD, PH, PW
    Py_ssize_t nsub, plane, img
    Py_ssize_t KU, OW, DW          # the width-unrolled grid (KU > 0; see ext/conv_plan.h)
    Py_ssize_t CI                  # image channels per group (C / KU when unrolled, else C)
    Py_ssize_t passes              # kernel passes per item: one per sample, or one (unrolled)
    const int64_t* phases
    const mt_conv_sub* subs
    const int64_t* offsets


cdef struct Sub:
    Py_ssize_t Od, Oh, Ow, Pext, taps, w_index
    Py_ssize_t ycol, ysd, ysh, ysw, ybase     # where output grid point (od, oh, ow) goes in y
    const int64_t* off


cdef Plan _plan(const unsigned char[::1] buf) except *:
    """The plan in `buf` (see ext/conv_plan.h), its sections' sizes and offset ranges checked."""
    cdef Plan r
    cdef const mt_conv_plan* h
    cdef Py_ssize_t k, size = sizeof(mt_conv_plan)
    if buf.shape[0] < size:
        raise ValueError("conv_direct: the plan is shorter than its head")
    h = <const mt_conv_plan*>&buf[0]
    size += 3 * h.nph * sizeof(int64_t) + h.nsub * sizeof(mt_conv_sub) + h.noff * sizeof(int64_t)
    if h.nph < 1 or h.nsub < 1 or h.noff < 0 or buf.shape[0] != size:
        raise ValueError("conv_direct: the plan's sections disagree with its length")
    r.G, r.C, r.M, r.Ud, r.Uh, r.Uw, r.L, r.B, r.nph = h.G, h.C, h.M, h.Ud, h.Uh, h.Uw, h.L, h.B, h.nph
    r.ID, r.IH, r.IW, r.SD, r.SH, r.SW, r.PD, r.PH, r.PW = h.ID, h.IH, h.IW, h.SD, h.SH, h.SW, h.PD, h.PH, h.PW
    r.nsub = h.nsub
    r.KU, r.OW, r.DW = h.KU, h.OW, h.DW
    if r.KU < 0 or (r.KU > 0 and (r.C % r.KU != 0 or r.OW < 1 or r.Uw != r.B * r.OW)):
        raise ValueError("conv_direct: the plan's width-unrolled grid is inconsistent")
    r.CI = r.C // r.KU if r.KU > 0 else r.C
    r.passes = 1 if r.KU > 0 else r.B
    r.plane = r.Ud * r.Uh * r.Uw
    r.img = r.ID * r.IH * r.IW
    r.phases = <const int64_t*>(h + 1)
    r.subs = <const mt_conv_sub*>(r.phases + 3 * r.nph)
    r.offsets = <const int64_t*>(r.subs + r.nsub)
    for k in range(r.nsub):
        if r.subs[k].off_index < 0 or r.subs[k].taps < 0 or r.subs[k].off_index + r.subs[k].taps > h.noff:
            raise ValueError("conv_direct: a sub-problem's taps lie outside the plan's offsets")
    return r


cdef inline Sub _sub(const Plan* pl, Py_ssize_t k) noexcept nogil:
    cdef Sub r
    cdef const mt_conv_sub* q = pl.subs + k
    r.Od, r.Oh, r.Ow, r.Pext, r.taps = q.Od, q.Oh, q.Ow, q.Pext, q.taps
    r.off = pl.offsets + q.off_index
    r.w_index = q.w_index
    r.ycol, r.ysd, r.ysh, r.ysw, r.ybase = q.ycol, q.ysd, q.ysh, q.ysw, q.ybase
    return r


cdef inline void row_pack(real* row, const real* src, Py_ssize_t n, Py_ssize_t lo, Py_ssize_t hi,
                          Py_ssize_t stride) noexcept nogil:
    """row[i] = src[i * stride] for lo <= i < hi, zero for the rest of row[:n]."""
    if real is float:
        float_row_pack(row, src, n, lo, hi, stride)
    else:
        double_row_pack(row, src, n, lo, hi, stride)


cdef inline void row_out(real* dst, const real* src, Py_ssize_t n, Py_ssize_t stride, real bias) noexcept nogil:
    """dst[i * stride] = src[i] + bias for i < n."""
    if real is float:
        float_row_out(dst, src, n, stride, bias)
    else:
        double_row_out(dst, src, n, stride, bias)


cdef inline void ka_call(int variant, const real* x, const Py_ssize_t* coff, Py_ssize_t nct, const real* wp,
                         real* y, Py_ssize_t ldy, Py_ssize_t p0, Py_ssize_t p1, Py_ssize_t mvalid) noexcept nogil:
    """Kernel A over points [p0, p1) (conv_direct.h's mt_ka_call)."""
    if real is float:
        mt_ka_call_float(variant, x, coff, nct, wp, y, ldy, p0, p1, mvalid)
    else:
        mt_ka_call_double(variant, x, coff, nct, wp, y, ldy, p0, p1, mvalid)


cdef inline void kb_call(int tb, const real* dy, Py_ssize_t ldd, const real* x, const Py_ssize_t* off,
                         Py_ssize_t nb, Py_ssize_t L, Py_ssize_t plen, real* out, Py_ssize_t ldo) noexcept nogil:
    """Kernel B's microkernel for tb taps (conv_direct.h's mt_kb_call)."""
    if real is float:
        mt_kb_call_float(tb, dy, ldd, x, off, nb, L, plen, out, ldo)
    else:
        mt_kb_call_double(tb, dy, ldd, x, off, nb, L, plen, out, ldo)


cdef inline void zero(real* dst, Py_ssize_t n) noexcept nogil:
    if real is float:
        float_zero(dst, n)
    else:
        double_zero(dst, n)


cdef inline void _valid_range(const Plan* pl, Py_ssize_t rw, Py_ssize_t limit, Py_ssize_t* lo,
                              Py_ssize_t* hi) noexcept nogil:
    """[lo, hi): the uw with 0 <= uw * SW + rw - PW < IW, clipped to [0, limit)."""
    lo[0] = 0
    if rw - pl.PW < 0:
        lo[0] = (pl.PW - rw + pl.SW - 1) // pl.SW
    hi[0] = 0
    if pl.IW - 1 + pl.PW - rw >= 0:
        hi[0] = (pl.IW - 1 + pl.PW - rw) // pl.SW + 1
    if hi[0] > limit:
        hi[0] = limit
    if lo[0] > hi[0]:
        lo[0] = hi[0]


cdef inline bint _image_row(const Plan* pl, Py_ssize_t ph, Py_ssize_t ud, Py_ssize_t uh, Py_ssize_t* idd,
                            Py_ssize_t* ih) noexcept nogil:
    """(idd, ih): the image row that grid row (phase ph, ud, uh) holds; False where it lies in
    the padding."""
    idd[0] = ud * pl.SD + pl.phases[3 * ph] - pl.PD
    ih[0] = uh * pl.SH + pl.phases[3 * ph + 1] - pl.PH
    return 0 <= idd[0] < pl.ID and 0 <= ih[0] < pl.IH


cdef void pack(const real* img, Py_ssize_t nb, real* buf, const Plan* pl) noexcept nogil:
    """buf[c, b, :] (channel stride B * L, sample stride L) = the shifted grid of image
    img[b, c] for b < nb; every one of the L entries is written (zeros outside the image).
    At stride 2 the two phases of a row are split in one pass."""
    cdef Py_ssize_t b, c, ph, ud, uh, idd, ih, lo, hi, lo1, hi1, rd, rh, rw, rows
    cdef bint pair
    cdef real* dst
    cdef real* row
    cdef const real* src
    cdef const real* line
    rows = pl.Ud * pl.Uh * pl.Uw
    for c in range(pl.C):
        for b in range(nb):
            dst = buf + (c * pl.B + b) * pl.L
            src = img + (b * pl.G * pl.C + c) * pl.img
            ph = 0
            while ph < pl.nph:
                rd, rh, rw = pl.phases[3 * ph], pl.phases[3 * ph + 1], pl.phases[3 * ph + 2]
                pair = (pl.SW == 2 and rw == 0 and ph + 1 < pl.nph and pl.phases[3 * ph + 3] == rd
                        and pl.phases[3 * ph + 4] == rh and pl.phases[3 * ph + 5] == 1)
                _valid_range(pl, rw, pl.Uw, &lo, &hi)
                if pair:
                    _valid_range(pl, 1, pl.Uw, &lo1, &hi1)
                for ud in range(pl.Ud):
                    for uh in range(pl.Uh):
                        row = dst + (ph * pl.Ud + ud) * pl.Uh * pl.Uw + uh * pl.Uw
                        if not _image_row(pl, ph, ud, uh, &idd, &ih):
                            zero(row, pl.Uw)
                            if pair:
                                zero(row + rows, pl.Uw)
                            continue
                        line = src + (idd * pl.IH + ih) * pl.IW + rw - pl.PW
                        if not pair:
                            row_pack(row, line, pl.Uw, lo, hi, pl.SW)
                        elif real is float:
                            float_row_pack2(row, row + rows, line, pl.Uw, lo, hi, lo1, hi1)
                        else:
                            double_row_pack2(row, row + rows, line, pl.Uw, lo, hi, lo1, hi1)
                ph = ph + (2 if pair else 1)
            memset(dst + pl.nph * pl.plane, 0, (pl.L - pl.nph * pl.plane) * sizeof(real))


cdef void pack_unrolled(const real* img, Py_ssize_t nb, real* buf, const Plan* pl) noexcept nogil:
    """buf[c * KU + kw, :] (channel stride L) = the width-unrolled grid of images img[b, c],
    b < nb: grid row (phase, ud, uh) holds, at columns b * OW + ow, image row (idd, ih)'s
    columns ow * SW + kw * DW - PW (zeros outside the image, and for samples nb <= b < B)."""
    cdef Py_ssize_t b, c, kw, ph, ud, uh, idd, ih
    cdef real* dst
    cdef real* row
    cdef const real* src
    for c in range(pl.CI):
        dst = buf + c * pl.KU * pl.L
        for ph in range(pl.nph):
            for ud in range(pl.Ud):
                for uh in range(pl.Uh):
                    row = dst + (ph * pl.Ud + ud) * pl.Uh * pl.Uw + uh * pl.Uw
                    if not _image_row(pl, ph, ud, uh, &idd, &ih):
                        for kw in range(pl.KU):
                            zero(row + kw * pl.L, pl.Uw)
                        continue
                    src = img + (c * pl.ID + idd) * pl.IH * pl.IW + ih * pl.IW
                    for b in range(nb):
                        if real is float:
                            float_row_unroll(row + b * pl.OW, pl.L, src + b * pl.G * pl.CI * pl.img, pl.IW, pl.KU,
                                             pl.OW, pl.SW, pl.DW, pl.PW)
                        else:
                            double_row_unroll(row + b * pl.OW, pl.L, src + b * pl.G * pl.CI * pl.img, pl.IW, pl.KU,
                                              pl.OW, pl.SW, pl.DW, pl.PW)
                    if nb < pl.B:
                        for kw in range(pl.KU):
                            zero(row + kw * pl.L + nb * pl.OW, (pl.B - nb) * pl.OW)
        for kw in range(pl.KU):
            memset(dst + kw * pl.L + pl.nph * pl.plane, 0, (pl.L - pl.nph * pl.plane) * sizeof(real))


cdef inline void pack_item(const real* img, Py_ssize_t nb, real* buf, const Plan* pl) noexcept nogil:
    if pl.KU > 0:
        pack_unrolled(img, nb, buf, pl)
    else:
        pack(img, nb, buf, pl)


cdef struct Item:
    Py_ssize_t gi, n0, nb


cdef inline Item _item(Py_ssize_t it, const Plan* pl, Py_ssize_t N) noexcept nogil:
    """Work item it = (chunk of B samples, group gi): samples n0 .. n0 + nb.  (A struct result:
    values assigned in a prange body are thread-private, values written through pointers are not.)"""
    cdef Item r
    r.gi = it % pl.G
    r.n0 = (it // pl.G) * pl.B
    r.nb = pl.B
    if r.n0 + r.nb > N:
        r.nb = N - r.n0
    return r


cdef enum:
    PIECE = 2048   # grid points per kernel-B call over one long sample (a multiple of any SIMD width)
    PIECE_BYTES = 256 * 1024   # bytes of packed image per kernel-A piece: a quarter of a 1 MiB L2


cdef inline Py_ssize_t _round_up(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return (a + b - 1) // b * b


def forward(const real[::1] x, const real[::1] wp, const real[::1] bias, real[::1] y,
            const unsigned char[::1] plan, Py_ssize_t N, int variant, Py_ssize_t mr, Py_ssize_t nv,
            real[:, ::1] xbuf, real[:, ::1] ybuf, Py_ssize_t[:, ::1] coffs, int num_threads):
    """y = sum over the plan's sub-problems of W_k (*) x [+ bias], each sub-problem writing its
    own points of y (one for a convolution, one per stride phase for a strided data gradient).
    wp holds each sub-problem's weight packed as kernel A reads it, from its w_index on.
    Items are (chunk of B samples, group); xbuf/ybuf are per-thread scratch of C*B*L and
    ceil(M/mr)*mr*B*L entries, coffs of C * (largest sub-problem's taps) (channel, tap) offsets.
    The grid points of a pass go through the microkernel in pieces of about PIECE_BYTES of grid
    rows per channel, every block of output rows over one piece before the next piece, so that
    the piece of the packed image stays in L2 while it is read once per block."""
    cdef Plan pl = _plan(plan)
    cdef Sub sb
    cdef Py_ssize_t nchunks = (N + pl.B - 1) // pl.B
    cdef Py_ssize_t it, gi, n0, nb, b, mb, m, od, oh, k, c, t, pend, p0, p1, piece
    cdef Py_ssize_t mblocks = (pl.M + mr - 1) // mr
    cdef Py_ssize_t cs = pl.passes * pl.L              # channel stride of the packed image and output grid
    cdef Item item
    cdef Py_ssize_t block = nv * (mt_vbytes() // sizeof(real))
    cdef bint has_bias = bias.shape[0] > 0
    cdef real* xb
    cdef real* yb
    cdef real* dst
    cdef const real* src
    cdef const real* wg
    cdef real bv
    cdef Py_ssize_t* coff
    cdef int tid
    piece = PIECE_BYTES // (pl.C * sizeof(real)) // block * block
    if piece < block:
        piece = block
    for it in prange(nchunks * pl.G, nogil=True, schedule="static", num_threads=num_threads):
        tid = threadid()
        item = _item(it, &pl, N)
        gi, n0, nb = item.gi, item.n0, item.nb
        xb = &xbuf[tid, 0]
        yb = &ybuf[tid, 0]
        coff = &coffs[tid, 0]
        pack_item(&x[0] + (n0 * pl.G + gi) * pl.CI * pl.img, nb, xb, &pl)
        for k in range(pl.nsub):
            sb = _sub(&pl, k)
            pend = _round_up(sb.Pext, block // nv)      # whole vectors: the microkernel call ends in a tail
            wg = &wp[0] + sb.w_index + gi * mblocks * mr * pl.C * sb.taps
            for c in range(pl.C):
                for t in range(sb.taps):
                    coff[c * sb.taps + t] = c * cs + sb.off[t]
            for b in range(nb if pl.KU == 0 else 1):
                p0 = 0
                while p0 < pend:
                    p1 = p0 + piece
                    if p1 > pend:
                        p1 = pend
                    for mb in range(mblocks):
                        ka_call(variant, xb + b * pl.L, coff, pl.C * sb.taps, wg + mb * mr * pl.C * sb.taps,
                                yb + mb * mr * cs + b * pl.L, cs, p0, p1, pl.M - mb * mr)
                    p0 = p1
            # crop the grid into y (+ bias): sample b of the grid at b * L (shifted grid) or at
            # columns b * OW (unrolled)
            for b in range(nb):
                for m in range(pl.M):
                    bv = bias[gi * pl.M + m] if has_bias else 0
                    dst = &y[0] + (((n0 + b) * pl.G + gi) * pl.M + m) * sb.ycol + sb.ybase
                    src = yb + m * cs + (b * pl.OW if pl.KU > 0 else b * pl.L)
                    for od in range(sb.Od):
                        for oh in range(sb.Oh):
                            row_out(dst + od * sb.ysd + oh * sb.ysh, src + (od * pl.Uh + oh) * pl.Uw, sb.Ow,
                                    sb.ysw, bv)


def weight_grad(const real[::1] dy, const real[::1] x, real[:, ::1] dw_acc,
                const unsigned char[::1] plan, Py_ssize_t N, int bvariant, real[:, ::1] xbuf,
                real[:, ::1] dybuf, int num_threads):
    """dw_acc[thread] (G, Mpad, C, taps) += dy . shifted(x), over items (chunk of B samples,
    group); Mpad = M rounded up to MR2 (rows past M get zeros).  dybuf holds Mpad rows of B*L
    entries per thread."""
    cdef Plan pl = _plan(plan)
    cdef Sub sb = _sub(&pl, 0)
    cdef Py_ssize_t nchunks = (N + pl.B - 1) // pl.B
    cdef Py_ssize_t mr2 = mt_b_rows_of(bvariant), tbmax = mt_b_tbmax_of(bvariant)
    cdef Py_ssize_t mpad = (pl.M + mr2 - 1) // mr2 * mr2
    cdef Py_ssize_t vw = mt_vbytes() // sizeof(real)
    cdef Py_ssize_t plen = _round_up(sb.Pext, vw)
    cdef Py_ssize_t cs = pl.passes * pl.L              # channel stride of the packed image and dy grid
    cdef Py_ssize_t kb                                 # samples the microkernel sums over, L apart
    cdef Py_ssize_t it, gi, n0, nb, b, m, od, oh, i, c, t0, tb, nblk, mb, piece, p0, pn
    cdef Item item
    cdef real* xb
    cdef real* db
    cdef real* row
    cdef const real* src
    cdef real* acc
    cdef int tid
    for it in prange(nchunks * pl.G, nogil=True, schedule="static", num_threads=num_threads):
        tid = threadid()
        item = _item(it, &pl, N)
        gi, n0, nb = item.gi, item.n0, item.nb
        kb = nb if pl.KU == 0 else 1
        xb = &xbuf[tid, 0]
        db = &dybuf[tid, 0]
        pack_item(&x[0] + (n0 * pl.G + gi) * pl.CI * pl.img, nb, xb, &pl)
        # expand dy onto the grid: zeros at garbage positions, past the end, in padded rows and
        # (unrolled) in the columns of samples past nb
        for m in range(mpad):
            for b in range(kb):
                row = db + m * cs + b * pl.L
                if m >= pl.M:
                    memset(row, 0, plen * sizeof(real))
                    continue
                for od in range(sb.Od):
                    for oh in range(pl.Uh):
                        if oh >= sb.Oh:
                            zero(row + (od * pl.Uh + oh) * pl.Uw, pl.Uw)
                        elif pl.KU == 0:
                            src = &dy[0] + (((n0 + b) * pl.G + gi) * pl.M + m) * sb.ycol
                            row_pack(row + (od * pl.Uh + oh) * pl.Uw, src + (od * sb.Oh + oh) * sb.Ow,
                                     pl.Uw, 0, sb.Ow, 1)
                        else:
                            for i in range(pl.B):
                                if i < nb:
                                    src = &dy[0] + (((n0 + i) * pl.G + gi) * pl.M + m) * sb.ycol
                                    row_pack(row + (od * pl.Uh + oh) * pl.Uw + i * pl.OW,
                                             src + (od * sb.Oh + oh) * sb.Ow, pl.OW, 0, pl.OW, 1)
                                else:
                                    zero(row + (od * pl.Uh + oh) * pl.Uw + i * pl.OW, pl.OW)
                i = sb.Od * pl.Uh * pl.Uw
                if i < plen:
                    memset(row + i, 0, (plen - i) * sizeof(real))
        acc = &dw_acc[tid, 0] + gi * mpad * pl.C * sb.taps
        # one channel of the image grid stays in L1 while the blocks of dy rows stream past it
        # from L2; a long single pass is cut into pieces of PIECE grid points so that both fit
        piece = plen
        if kb == 1 and piece > PIECE:
            piece = PIECE
        p0 = 0
        while p0 < plen:
            pn = plen - p0
            if pn > piece:
                pn = piece
            for c in range(pl.C):
                mb = 0
                while mb < pl.M:
                    nblk = (sb.taps + tbmax - 1) // tbmax
                    t0 = 0
                    while t0 < sb.taps:
                        tb = (sb.taps - t0 + nblk - 1) // nblk
                        kb_call(<int>(bvariant * 8 + tb), db + mb * cs + p0, cs, xb + c * cs + p0,
                                <const Py_ssize_t*>sb.off + t0, kb, pl.L, pn,
                                acc + (mb * pl.C + c) * sb.taps + t0, pl.C * sb.taps)
                        nblk = nblk - 1
                        t0 = t0 + tb
                    mb = mb + mr2
            p0 = p0 + pn
