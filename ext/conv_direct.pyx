# cython: language_level=3
"""Direct convolution with SIMD register-blocked microkernels: no im2col, no GEMM packing.

The image of one (sample, group) is copied once into a "shifted grid" buffer: zero-padded,
split into stride phases (phase r of an axis holds padded positions u * S + r), each phase a
plane of U = (Ud, Uh, Uw) points.  Column position o = (od, oh, ow) then maps to grid position
p = (od * Uh + oh) * Uw + ow, and kernel tap k reads the buffer at p + off[k] with one constant
offset per tap (k * D = q * S + r per axis: phase r, shift q).  Grid positions with oh >= Oh or
ow >= Ow are garbage: computed and dropped (forward), or fed zeros (weight gradient).

  kernel A  y[m, p]  = sum over c, k of W[m, c, k] * x[c, p + off[k]]      (Conv forward, and the
            data gradient: per stride phase of the image, a correlation of dY with the taps
            that reach that phase; at stride 1 the convolution with the flipped weight)
  kernel B  dW[m, c, k] += sum over p of dy[m, p] * x[c, p + off[k]]     (weight gradient)

A's microkernel keeps an MR x (NV vectors) block of y in registers and broadcasts MR weights per
(c, k); B's keeps MR2 x TB dot products (TB taps of one channel) and reduces them at the end.
The SIMD width follows the compiler's target (AVX-512, AVX, else 128-bit) through GCC vector
extensions; float and double share the code.

`plan` (int64) = [G, C, M, Ud, Uh, Uw, L, B, nph, ID, IH, IW, SD, SH, SW, PD, PH, PW, nsub],
then nph phase triples (rd, rh, rw) of the packed image, then nsub sub-problem records
[Od, Oh, Ow, Pext, taps, off_index, w_index, ycol, ysd, ysh, ysw, ybase], then the tap offsets.
L: buffer length per channel and sample; B: samples per work item.  A sub-problem computes an
Od x Oh x Ow output grid (Pext grid positions: the last valid one + 1) from `taps` taps whose
offsets start at offsets[off_index] and whose packed weight starts at wp[w_index]; its point
(od, oh, ow) of channel plane q goes to y[q * ycol + ybase + od * ysd + oh * ysh + ow * ysw].
A convolution is one sub-problem; the data gradient is one per stride phase of the image, all
reading one packed copy of the columns.
"""
from cython.parallel cimport prange, threadid
from libc.string cimport memset

ctypedef fused real:
    float
    double

cdef extern from *:
    """
    #include <stddef.h>
    #include <string.h>
    #if defined(__AVX512F__)
    #define MT_VBYTES 64
    #elif defined(__AVX__)
    #define MT_VBYTES 32
    #else
    #define MT_VBYTES 16
    #endif
    typedef float mt_vf __attribute__((vector_size(MT_VBYTES)));
    typedef float mt_vfu __attribute__((vector_size(MT_VBYTES), aligned(4)));
    typedef double mt_vd __attribute__((vector_size(MT_VBYTES)));
    typedef double mt_vdu __attribute__((vector_size(MT_VBYTES), aligned(8)));
    /* Keep a loaded vector in a register: without this GCC folds the load into every FMA
       that uses it, and unaligned loads split across cache lines then bound the loop. */
    #if defined(__x86_64__) || defined(__i386__)
    #define MT_IN_REGISTER(v) __asm__("" : "+v"(v))
    #else
    #define MT_IN_REGISTER(v) ((void)0)
    #endif
    #define MT_VWF (MT_VBYTES / 4)
    #define MT_VWD (MT_VBYTES / 8)

    /* Kernel A microkernel: y[r, p] for r < mvalid, p in [p0, p1) stepping NV*VW, summing
       over the nct (channel, tap) pairs i: x[p + coff[i]] times the MR weights wp[i*MR ..]. */
    #define MT_KA(NAME, T, V, VU, VW, MR, NV)                                                  \\
    static void NAME(const T* restrict x, const ptrdiff_t* restrict coff, ptrdiff_t nct,       \\
                     const T* restrict wp, T* restrict y, ptrdiff_t ldy, ptrdiff_t p0,         \\
                     ptrdiff_t p1, ptrdiff_t mvalid)                                           \\
    {                                                                                          \\
        for (ptrdiff_t p = p0; p < p1; p += (NV) * (VW)) {                                     \\
            V acc[MR][NV];                                                                     \\
            _Pragma("GCC unroll 16") for (int r = 0; r < (MR); r++)                            \\
                _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++) acc[r][v] = (V){0};    \\
            const T* restrict wc = wp;                                                         \\
            const T* restrict xq = x + p;                                                      \\
            for (ptrdiff_t i = 0; i < nct; i++, wc += (MR)) {                                  \\
                const T* restrict xp = xq + coff[i];                                           \\
                V xv[NV];                                                                      \\
                _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++)                        \\
                    xv[v] = *(const VU*)(xp + v * (VW));                                       \\
                _Pragma("GCC unroll 16") for (int r = 0; r < (MR); r++) {                      \\
                    T w = wc[r];                                                               \\
                    _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++)                    \\
                        acc[r][v] += xv[v] * w;                                                \\
                }                                                                              \\
            }                                                                                  \\
            for (int r = 0; r < (MR); r++) {                                                   \\
                if (r >= mvalid) break;                                                        \\
                _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++)                        \\
                    *(VU*)(y + r * ldy + p + v * (VW)) = acc[r][v];                            \\
            }                                                                                  \\
        }                                                                                      \\
    }

    /* Kernel B microkernel: out[r * ldo + t] += sum over samples b and p < plen of
       dy[r, b * L + p] x[b * L + p + off[t]]. */
    #define MT_KB(NAME, T, V, VU, VW, MR2, TB)                                                 \\
    static void NAME(const T* restrict dy, ptrdiff_t ldd, const T* restrict x,                 \\
                     const ptrdiff_t* restrict off, ptrdiff_t nb, ptrdiff_t L, ptrdiff_t plen, \\
                     T* restrict out, ptrdiff_t ldo)                                           \\
    {                                                                                          \\
        V acc[MR2][TB];                                                                        \\
        _Pragma("GCC unroll 16") for (int r = 0; r < (MR2); r++)                               \\
            _Pragma("GCC unroll 16") for (int t = 0; t < (TB); t++) acc[r][t] = (V){0};        \\
        for (ptrdiff_t b = 0; b < nb; b++) {                                                   \\
            const T* restrict d0 = dy + b * L;                                                 \\
            const T* restrict x0 = x + b * L;                                                  \\
            for (ptrdiff_t p = 0; p < plen; p += (VW)) {                                       \\
                V xv[TB];                                                                      \\
                _Pragma("GCC unroll 16") for (int t = 0; t < (TB); t++) {                      \\
                    xv[t] = *(const VU*)(x0 + p + off[t]);                                     \\
                    MT_IN_REGISTER(xv[t]);                                                     \\
                }                                                                              \\
                _Pragma("GCC unroll 16") for (int r = 0; r < (MR2); r++) {                     \\
                    V d = *(const VU*)(d0 + r * ldd + p);                                      \\
                    MT_IN_REGISTER(d);                                                         \\
                    _Pragma("GCC unroll 16") for (int t = 0; t < (TB); t++)                    \\
                        acc[r][t] += d * xv[t];                                                \\
                }                                                                              \\
            }                                                                                  \\
        }                                                                                      \\
        for (int r = 0; r < (MR2); r++)                                                        \\
            for (int t = 0; t < (TB); t++) {                                                   \\
                T s = 0;                                                                       \\
                for (int i = 0; i < (VW); i++) s += acc[r][t][i];                              \\
                out[r * ldo + t] += s;                                                         \\
            }                                                                                  \\
    }

    /* Register blocks: AVX-512 has 32 vector registers, the others 16 (all of them used). */
    #if MT_VBYTES == 64
    #define MT_A_VARIANTS(X, T, V, VU, VW) \\
        X(T##_a8, T, V, VU, VW, 8, 3) X(T##_a6, T, V, VU, VW, 6, 4) X(T##_a4, T, V, VU, VW, 4, 6) \\
        X(T##_a2, T, V, VU, VW, 2, 8) X(T##_a1, T, V, VU, VW, 1, 12)
    static const int mt_a_mr[5] = {8, 6, 4, 2, 1};
    static const int mt_a_nv[5] = {3, 4, 6, 8, 12};
    /* kernel B: row blocks of 8 with up to 3 taps, or single rows with up to 8 taps */
    #define MT_B_VARIANTS(X, T, V, VU, VW) \\
        X(T##_b8_1, T, V, VU, VW, 8, 1) X(T##_b8_2, T, V, VU, VW, 8, 2) X(T##_b8_3, T, V, VU, VW, 8, 3) \\
        X(T##_b1_1, T, V, VU, VW, 1, 1) X(T##_b1_2, T, V, VU, VW, 1, 2) X(T##_b1_3, T, V, VU, VW, 1, 3) \\
        X(T##_b1_4, T, V, VU, VW, 1, 4) X(T##_b1_5, T, V, VU, VW, 1, 5) X(T##_b1_6, T, V, VU, VW, 1, 6) \\
        X(T##_b1_7, T, V, VU, VW, 1, 7) X(T##_b1_8, T, V, VU, VW, 1, 8)
    #define MT_B_TABLE(T) {T##_b8_1, T##_b8_2, T##_b8_3, 0, 0, 0, 0, 0, \\
                           T##_b1_1, T##_b1_2, T##_b1_3, T##_b1_4, T##_b1_5, T##_b1_6, T##_b1_7, T##_b1_8}
    static const int mt_b_rows[2] = {8, 1};
    static const int mt_b_tbmax[2] = {3, 8};
    #else
    #define MT_A_VARIANTS(X, T, V, VU, VW) \\
        X(T##_a8, T, V, VU, VW, 4, 3) X(T##_a6, T, V, VU, VW, 3, 3) X(T##_a4, T, V, VU, VW, 2, 5) \\
        X(T##_a2, T, V, VU, VW, 2, 4) X(T##_a1, T, V, VU, VW, 1, 6)
    static const int mt_a_mr[5] = {4, 3, 2, 2, 1};
    static const int mt_a_nv[5] = {3, 3, 5, 4, 6};
    #define MT_B_VARIANTS(X, T, V, VU, VW) \\
        X(T##_b8_1, T, V, VU, VW, 4, 1) X(T##_b8_2, T, V, VU, VW, 4, 2) X(T##_b8_3, T, V, VU, VW, 4, 3) \\
        X(T##_b1_1, T, V, VU, VW, 1, 1) X(T##_b1_2, T, V, VU, VW, 1, 2) X(T##_b1_3, T, V, VU, VW, 1, 3) \\
        X(T##_b1_4, T, V, VU, VW, 1, 4)
    #define MT_B_TABLE(T) {T##_b8_1, T##_b8_2, T##_b8_3, 0, 0, 0, 0, 0, \\
                           T##_b1_1, T##_b1_2, T##_b1_3, T##_b1_4, 0, 0, 0, 0}
    static const int mt_b_rows[2] = {4, 1};
    static const int mt_b_tbmax[2] = {3, 4};
    #endif

    MT_A_VARIANTS(MT_KA, float, mt_vf, mt_vfu, MT_VWF)
    MT_A_VARIANTS(MT_KA, double, mt_vd, mt_vdu, MT_VWD)
    MT_B_VARIANTS(MT_KB, float, mt_vf, mt_vfu, MT_VWF)
    MT_B_VARIANTS(MT_KB, double, mt_vd, mt_vdu, MT_VWD)

    typedef void (*mt_ka_f)(const float*, const ptrdiff_t*, ptrdiff_t, const float*, float*, ptrdiff_t,
                            ptrdiff_t, ptrdiff_t, ptrdiff_t);
    typedef void (*mt_ka_d)(const double*, const ptrdiff_t*, ptrdiff_t, const double*, double*, ptrdiff_t,
                            ptrdiff_t, ptrdiff_t, ptrdiff_t);
    static const mt_ka_f mt_ka_float[5] = {float_a8, float_a6, float_a4, float_a2, float_a1};
    static const mt_ka_d mt_ka_double[5] = {double_a8, double_a6, double_a4, double_a2, double_a1};
    typedef void (*mt_kb_f)(const float*, ptrdiff_t, const float*, const ptrdiff_t*, ptrdiff_t, ptrdiff_t,
                            ptrdiff_t, float*, ptrdiff_t);
    typedef void (*mt_kb_d)(const double*, ptrdiff_t, const double*, const ptrdiff_t*, ptrdiff_t, ptrdiff_t,
                            ptrdiff_t, double*, ptrdiff_t);
    static const mt_kb_f mt_kb_float[16] = MT_B_TABLE(float);
    static const mt_kb_d mt_kb_double[16] = MT_B_TABLE(double);

    static void mt_ka_call_float(int variant, const float* x, const ptrdiff_t* coff, ptrdiff_t nct,
                                 const float* wp, float* y, ptrdiff_t ldy, ptrdiff_t p0, ptrdiff_t p1,
                                 ptrdiff_t mvalid)
    { mt_ka_float[variant](x, coff, nct, wp, y, ldy, p0, p1, mvalid); }
    static void mt_ka_call_double(int variant, const double* x, const ptrdiff_t* coff, ptrdiff_t nct,
                                  const double* wp, double* y, ptrdiff_t ldy, ptrdiff_t p0, ptrdiff_t p1,
                                  ptrdiff_t mvalid)
    { mt_ka_double[variant](x, coff, nct, wp, y, ldy, p0, p1, mvalid); }
    static void mt_kb_call_float(int tb, const float* dy, ptrdiff_t ldd, const float* x, const ptrdiff_t* off,
                                 ptrdiff_t nb, ptrdiff_t L, ptrdiff_t plen, float* out, ptrdiff_t ldo)
    { mt_kb_float[tb - 1](dy, ldd, x, off, nb, L, plen, out, ldo); }
    static void mt_kb_call_double(int tb, const double* dy, ptrdiff_t ldd, const double* x, const ptrdiff_t* off,
                                  ptrdiff_t nb, ptrdiff_t L, ptrdiff_t plen, double* out, ptrdiff_t ldo)
    { mt_kb_double[tb - 1](dy, ldd, x, off, nb, L, plen, out, ldo); }
    /* Row copies with restrict pointers, so that GCC vectorizes them. */
    /* Rows are short: plain vectorized loops, never memcpy/memset calls. */
    #if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
    #define MT_NO_LIBCALLS __attribute__((optimize("no-tree-loop-distribute-patterns"), \\
                                          target("prefer-vector-width=512")))
    #else
    #define MT_NO_LIBCALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))
    #endif
    #define MT_ROWOPS(T)                                                                       \\
    static MT_NO_LIBCALLS void T##_row_pack(T* restrict row, const T* restrict src, ptrdiff_t n, \\
                                            ptrdiff_t lo, ptrdiff_t hi, ptrdiff_t stride)      \\
    {                                                                                          \\
        for (ptrdiff_t i = 0; i < lo; i++) row[i] = 0;                                         \\
        if (stride == 1) for (ptrdiff_t i = lo; i < hi; i++) row[i] = src[i];                  \\
        else if (stride == 2) for (ptrdiff_t i = lo; i < hi; i++) row[i] = src[2 * i];         \\
        else for (ptrdiff_t i = lo; i < hi; i++) row[i] = src[i * stride];                     \\
        for (ptrdiff_t i = hi; i < n; i++) row[i] = 0;                                         \\
    }                                                                                          \\
    static MT_NO_LIBCALLS void T##_row_out(T* restrict dst, const T* restrict src, ptrdiff_t n,  \\
                                           ptrdiff_t stride, T bias)                           \\
    {                                                                                          \\
        if (stride == 1) for (ptrdiff_t i = 0; i < n; i++) dst[i] = src[i] + bias;             \\
        else if (stride == 2) for (ptrdiff_t i = 0; i < n; i++) dst[2 * i] = src[i] + bias;    \\
        else for (ptrdiff_t i = 0; i < n; i++) dst[i * stride] = src[i] + bias;               \\
    }                                                                                          \\
    static MT_NO_LIBCALLS void T##_zero(T* restrict dst, ptrdiff_t n)                          \\
    {                                                                                          \\
        for (ptrdiff_t i = 0; i < n; i++) dst[i] = 0;                                          \\
    }                                                                                          \\
    /* Two stride-2 phase rows in one pass: r0[i] = src[2i] on [lo0, hi0), r1[i] = src[2i+1]  \\
       on [lo1, hi1), zero elsewhere in r0[:n] and r1[:n]. */                                 \\
    static MT_NO_LIBCALLS void T##_row_pack2(T* restrict r0, T* restrict r1, const T* restrict src, \\
                                             ptrdiff_t n, ptrdiff_t lo0, ptrdiff_t hi0,        \\
                                             ptrdiff_t lo1, ptrdiff_t hi1)                     \\
    {                                                                                          \\
        ptrdiff_t lo = lo0 > lo1 ? lo0 : lo1, hi = hi0 < hi1 ? hi0 : hi1;                     \\
        if (hi < lo) hi = lo;                                                                  \\
        for (ptrdiff_t i = 0; i < lo; i++) {                                                   \\
            r0[i] = (i >= lo0 && i < hi0) ? src[2 * i] : 0;                                    \\
            r1[i] = (i >= lo1 && i < hi1) ? src[2 * i + 1] : 0;                                \\
        }                                                                                      \\
        for (ptrdiff_t i = lo; i < hi; i++) { r0[i] = src[2 * i]; r1[i] = src[2 * i + 1]; }    \\
        for (ptrdiff_t i = hi; i < n; i++) {                                                   \\
            r0[i] = (i >= lo0 && i < hi0) ? src[2 * i] : 0;                                    \\
            r1[i] = (i >= lo1 && i < hi1) ? src[2 * i + 1] : 0;                                \\
        }                                                                                      \\
    }
    MT_ROWOPS(float)
    MT_ROWOPS(double)
    static int mt_vbytes(void) { return MT_VBYTES; }
    static int mt_a_mr_of(int v) { return mt_a_mr[v]; }
    static int mt_a_nv_of(int v) { return mt_a_nv[v]; }
    static int mt_b_rows_of(int v) { return mt_b_rows[v]; }
    static int mt_b_tbmax_of(int v) { return mt_b_tbmax[v]; }
    """
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
    """[(MR2, TBMAX)] of kernel B's two row blockings, by variant index."""
    return [(mt_b_rows_of(v), mt_b_tbmax_of(v)) for v in range(2)]


cdef struct Plan:
    Py_ssize_t G, C, M, Ud, Uh, Uw, L, B, nph
    Py_ssize_t ID, IH, IW, SD, SH, SW, PD, PH, PW
    Py_ssize_t nsub, plane, img
    const long long* phases
    const long long* subs
    const long long* offsets


cdef struct Sub:
    Py_ssize_t Od, Oh, Ow, Pext, taps, w_index
    Py_ssize_t ycol, ysd, ysh, ysw, ybase     # where output grid point (od, oh, ow) goes in y
    const long long* off


cdef Plan _plan(const long long[::1] p):
    cdef Plan r
    r.G, r.C, r.M, r.Ud, r.Uh, r.Uw, r.L, r.B, r.nph = p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]
    r.ID, r.IH, r.IW, r.SD, r.SH, r.SW, r.PD, r.PH, r.PW = p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17]
    r.nsub = p[18]
    r.plane = r.Ud * r.Uh * r.Uw
    r.img = r.ID * r.IH * r.IW
    r.phases = &p[19]
    r.subs = &p[19 + 3 * r.nph]
    r.offsets = &p[19 + 3 * r.nph + 12 * r.nsub]
    return r


cdef inline Sub _sub(const Plan* pl, Py_ssize_t k) noexcept nogil:
    cdef Sub r
    cdef const long long* q = pl.subs + 12 * k
    r.Od, r.Oh, r.Ow, r.Pext, r.taps = q[0], q[1], q[2], q[3], q[4]
    r.off = pl.offsets + q[5]
    r.w_index = q[6]
    r.ycol, r.ysd, r.ysh, r.ysw, r.ybase = q[7], q[8], q[9], q[10], q[11]
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


cdef inline void zero(real* dst, Py_ssize_t n) noexcept nogil:
    if real is float:
        float_zero(dst, n)
    else:
        double_zero(dst, n)


cdef inline void _valid_range(const Plan* pl, Py_ssize_t rw, Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """[lo, hi): the uw with 0 <= uw * SW + rw - PW < IW, clipped to [0, Uw)."""
    lo[0] = 0
    if rw - pl.PW < 0:
        lo[0] = (pl.PW - rw + pl.SW - 1) // pl.SW
    hi[0] = 0
    if pl.IW - 1 + pl.PW - rw >= 0:
        hi[0] = (pl.IW - 1 + pl.PW - rw) // pl.SW + 1
    if hi[0] > pl.Uw:
        hi[0] = pl.Uw
    if lo[0] > hi[0]:
        lo[0] = hi[0]


cdef void pack(const real* img, Py_ssize_t nb, real* buf, const Plan* pl) noexcept nogil:
    """buf[c, b, :] (channel stride nb * L, sample stride L) = the shifted grid of image
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
            dst = buf + (c * nb + b) * pl.L
            src = img + (b * pl.G * pl.C + c) * pl.img
            ph = 0
            while ph < pl.nph:
                rd, rh, rw = pl.phases[3 * ph], pl.phases[3 * ph + 1], pl.phases[3 * ph + 2]
                pair = (pl.SW == 2 and rw == 0 and ph + 1 < pl.nph and pl.phases[3 * ph + 3] == rd
                        and pl.phases[3 * ph + 4] == rh and pl.phases[3 * ph + 5] == 1)
                _valid_range(pl, rw, &lo, &hi)
                if pair:
                    _valid_range(pl, 1, &lo1, &hi1)
                for ud in range(pl.Ud):
                    idd = ud * pl.SD + rd - pl.PD
                    for uh in range(pl.Uh):
                        ih = uh * pl.SH + rh - pl.PH
                        row = dst + (ph * pl.Ud + ud) * pl.Uh * pl.Uw + uh * pl.Uw
                        if idd < 0 or idd >= pl.ID or ih < 0 or ih >= pl.IH:
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
    PIECE = 4096   # grid points per kernel-B call over one long sample (a multiple of any SIMD width)


cdef inline Py_ssize_t _round_up(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return (a + b - 1) // b * b


def forward(const real[::1] x, const real[::1] wp, const real[::1] bias, real[::1] y,
            const long long[::1] plan, Py_ssize_t N, int variant, Py_ssize_t mr, Py_ssize_t nv,
            real[:, ::1] xbuf, real[:, ::1] ybuf, Py_ssize_t[:, ::1] coffs, int num_threads):
    """y = sum over the plan's sub-problems of W_k (*) x [+ bias], each sub-problem writing its
    own points of y (one for a convolution, one per stride phase for a strided data gradient).
    wp holds each sub-problem's weight packed as kernel A reads it, from its w_index on.
    Items are (chunk of B samples, group); xbuf/ybuf are per-thread scratch of C*B*L and
    ceil(M/mr)*mr*B*L entries, coffs of C * (largest sub-problem's taps) (channel, tap) offsets."""
    cdef Plan pl = _plan(plan)
    cdef Sub sb
    cdef Py_ssize_t nchunks = (N + pl.B - 1) // pl.B
    cdef Py_ssize_t it, gi, n0, nb, b, mb, m, od, oh, k, c, t, pend, mblocks = (pl.M + mr - 1) // mr
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
    for it in prange(nchunks * pl.G, nogil=True, schedule="static", num_threads=num_threads):
        tid = threadid()
        item = _item(it, &pl, N)
        gi, n0, nb = item.gi, item.n0, item.nb
        xb = &xbuf[tid, 0]
        yb = &ybuf[tid, 0]
        coff = &coffs[tid, 0]
        pack(&x[0] + (n0 * pl.G + gi) * pl.C * pl.img, nb, xb, &pl)
        for k in range(pl.nsub):
            sb = _sub(&pl, k)
            pend = _round_up(sb.Pext, block)
            wg = &wp[0] + sb.w_index + gi * mblocks * mr * pl.C * sb.taps
            for c in range(pl.C):
                for t in range(sb.taps):
                    coff[c * sb.taps + t] = c * nb * pl.L + sb.off[t]
            for b in range(nb):
                for mb in range(mblocks):
                    if real is float:
                        mt_ka_call_float(variant, xb + b * pl.L, coff, pl.C * sb.taps, wg + mb * mr * pl.C * sb.taps,
                                         yb + (mb * mr * nb + b) * pl.L, nb * pl.L, 0, pend, pl.M - mb * mr)
                    else:
                        mt_ka_call_double(variant, xb + b * pl.L, coff, pl.C * sb.taps, wg + mb * mr * pl.C * sb.taps,
                                          yb + (mb * mr * nb + b) * pl.L, nb * pl.L, 0, pend, pl.M - mb * mr)
            # crop the grid into y (+ bias)
            for b in range(nb):
                for m in range(pl.M):
                    bv = bias[gi * pl.M + m] if has_bias else 0
                    dst = &y[0] + (((n0 + b) * pl.G + gi) * pl.M + m) * sb.ycol + sb.ybase
                    src = yb + (m * nb + b) * pl.L
                    for od in range(sb.Od):
                        for oh in range(sb.Oh):
                            row_out(dst + od * sb.ysd + oh * sb.ysh, src + (od * pl.Uh + oh) * pl.Uw, sb.Ow,
                                    sb.ysw, bv)


def weight_grad(const real[::1] dy, const real[::1] x, real[:, ::1] dw_acc,
                const long long[::1] plan, Py_ssize_t N, int bvariant, real[:, ::1] xbuf,
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
    cdef Py_ssize_t it, gi, n0, nb, b, m, od, oh, ow, i, c, t0, tb, nblk, mb, piece, p0, pn
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
        xb = &xbuf[tid, 0]
        db = &dybuf[tid, 0]
        pack(&x[0] + (n0 * pl.G + gi) * pl.C * pl.img, nb, xb, &pl)
        # expand dy onto the grid: zeros at garbage positions, past the end and in padded rows
        for m in range(mpad):
            for b in range(nb):
                row = db + (m * nb + b) * pl.L
                if m >= pl.M:
                    memset(row, 0, plen * sizeof(real))
                    continue
                src = &dy[0] + (((n0 + b) * pl.G + gi) * pl.M + m) * sb.ycol
                for od in range(sb.Od):
                    for oh in range(pl.Uh):
                        if oh < sb.Oh:
                            row_pack(row + (od * pl.Uh + oh) * pl.Uw, src + (od * sb.Oh + oh) * sb.Ow,
                                     pl.Uw, 0, sb.Ow, 1)
                        else:
                            zero(row + (od * pl.Uh + oh) * pl.Uw, pl.Uw)
                i = sb.Od * pl.Uh * pl.Uw
                if i < plen:
                    memset(row + i, 0, (plen - i) * sizeof(real))
        acc = &dw_acc[tid, 0] + gi * mpad * pl.C * sb.taps
        # a block of dy rows stays in cache while every channel's taps stream past it; a long
        # single sample is cut into pieces of PIECE grid points so that the block stays small
        piece = plen
        if nb == 1 and piece > PIECE:
            piece = PIECE
        p0 = 0
        while p0 < plen:
            pn = plen - p0
            if pn > piece:
                pn = piece
            mb = 0
            while mb < pl.M:
                for c in range(pl.C):
                    nblk = (sb.taps + tbmax - 1) // tbmax
                    t0 = 0
                    while t0 < sb.taps:
                        tb = (sb.taps - t0 + nblk - 1) // nblk
                        if real is float:
                            mt_kb_call_float(<int>(bvariant * 8 + tb), db + mb * nb * pl.L + p0, nb * pl.L,
                                             xb + c * nb * pl.L + p0, <const Py_ssize_t*>sb.off + t0, nb, pl.L, pn,
                                             acc + (mb * pl.C + c) * sb.taps + t0, pl.C * sb.taps)
                        else:
                            mt_kb_call_double(<int>(bvariant * 8 + tb), db + mb * nb * pl.L + p0, nb * pl.L,
                                              xb + c * nb * pl.L + p0, <const Py_ssize_t*>sb.off + t0, nb, pl.L, pn,
                                              acc + (mb * pl.C + c) * sb.taps + t0, pl.C * sb.taps)
                        nblk = nblk - 1
                        t0 = t0 + tb
                mb = mb + mr2
            p0 = p0 + pn
