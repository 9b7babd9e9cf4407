/* The memory-bound gradient kernels' loops with streaming stores (ext/stream.h): ReluGrad,
   SigmoidGrad, TanhGrad, LeakyReluGrad and the last passes of SoftmaxGrad and LogSoftmaxGrad,
   in float (_f) and double (_d).  Each computes dx from dy and v (X or Y, as the op defines)
   over the whole 64-byte cache lines of n elements, dx starting on one, and returns how many
   elements it wrote; the caller writes the head before the first line and the tail after the
   last with its scalar loop, which computes the same formula in the same order.  Whole lines
   only: a line half streamed and half stored (SoftmaxGrad rows of 1000 floats, AVX2) costs
   more than plain stores (docs/measurements.md, "Streaming stores"). */
#ifndef MINITRAIN_GRAD_STREAM_H
#define MINITRAIN_GRAD_STREAM_H
#include "stream.h"

/* NAME_f and NAME_d from one vector expression each (float, double) of g = dy, u = v and the
   scalar a; comparisons give the integer vectors mt_vfi / mt_vdi, used as masks. */
#define MT_GRAD_STREAM_T(NAME, SFX, T, EXPR)                                                     \
    static inline ptrdiff_t NAME##_##SFX(const T* dy, const T* v, T* dx, ptrdiff_t n, T a) {     \
        const ptrdiff_t lanes = MT_VEC_BYTES / sizeof(T), lines = n - n % (64 / sizeof(T));     \
        ptrdiff_t i = 0;                                                                         \
        for (; i < lines; i += lanes) {                                                          \
            mt_v##SFX g = mt_load_v##SFX(dy + i), u = mt_load_v##SFX(v + i);                    \
            mt_stream_v##SFX(dx + i, EXPR);                                                      \
        }                                                                                        \
        (void)a;                                                                                 \
        return i;                                                                                \
    }
#define MT_GRAD_STREAM(NAME, EXPR_F, EXPR_D)                                                     \
    MT_GRAD_STREAM_T(NAME, f, float, EXPR_F)                                                     \
    MT_GRAD_STREAM_T(NAME, d, double, EXPR_D)

/* dy where u > 0 else 0 (a mask, so a NaN or inf dy passes through unchanged) */
MT_GRAD_STREAM(mt_relu_grad_stream, (mt_vf)((mt_vfi)g & (u > 0.0f)), (mt_vd)((mt_vdi)g & (u > 0.0)))
/* dy where u > 0 else a * dy */
MT_GRAD_STREAM(mt_leaky_relu_grad_stream,
               (mt_vf)(((mt_vfi)g & (u > 0.0f)) | ((mt_vfi)(a * g) & ~(u > 0.0f))),
               (mt_vd)(((mt_vdi)g & (u > 0.0)) | ((mt_vdi)(a * g) & ~(u > 0.0))))
/* dy * y * (1 - y) */
MT_GRAD_STREAM(mt_sigmoid_grad_stream, g * u * (1.0f - u), g * u * (1.0 - u))
/* dy * (1 - y * y) */
MT_GRAD_STREAM(mt_tanh_grad_stream, g * (1.0f - u * u), g * (1.0 - u * u))
/* Softmax: y * (dy - a), a = sum(y * dy) over the row */
MT_GRAD_STREAM(mt_softmax_grad_stream, u * (g - a), u * (g - a))
/* LogSoftmax, given u = exp(y): dy - u * a, a = sum(dy) over the row */
MT_GRAD_STREAM(mt_log_softmax_grad_stream, g - u * a, g - u * a)

/* One of the above by op (0 and nothing written for MT_GRAD_NONE), for the Cython kernels. */
enum { MT_GRAD_RELU, MT_GRAD_LEAKY_RELU, MT_GRAD_SIGMOID, MT_GRAD_TANH, MT_GRAD_SOFTMAX,
       MT_GRAD_LOG_SOFTMAX, MT_GRAD_NONE };
#define MT_GRAD_STREAM_BY_OP(SFX, T)                                                             \
    static inline ptrdiff_t mt_grad_stream_##SFX(int op, const T* dy, const T* v, T* dx,         \
                                                 ptrdiff_t n, T a) {                             \
        switch (op) {                                                                            \
        case MT_GRAD_RELU: return mt_relu_grad_stream_##SFX(dy, v, dx, n, a);                    \
        case MT_GRAD_LEAKY_RELU: return mt_leaky_relu_grad_stream_##SFX(dy, v, dx, n, a);        \
        case MT_GRAD_SIGMOID: return mt_sigmoid_grad_stream_##SFX(dy, v, dx, n, a);              \
        case MT_GRAD_TANH: return mt_tanh_grad_stream_##SFX(dy, v, dx, n, a);                    \
        case MT_GRAD_SOFTMAX: return mt_softmax_grad_stream_##SFX(dy, v, dx, n, a);              \
        case MT_GRAD_LOG_SOFTMAX: return mt_log_softmax_grad_stream_##SFX(dy, v, dx, n, a);      \
        default: return 0;                                                                       \
        }                                                                                        \
    }
MT_GRAD_STREAM_BY_OP(f, float)
MT_GRAD_STREAM_BY_OP(d, double)
#endif
