/* Branch-free float exp and tanh for minitrain's Cython kernels: loops over them vectorise. */
#ifndef MINITRAIN_FASTMATH_H
#define MINITRAIN_FASTMATH_H
#include <string.h>
#include <stdint.h>
/* An expression that -ffast-math may not reassociate with what surrounds it (GCC 12+); where
   the compiler lacks the barrier, the plain expression. */
#if defined(__has_builtin)
#if __has_builtin(__builtin_assoc_barrier)
#define MT_ASSOC_BARRIER(e) __builtin_assoc_barrier(e)
#endif
#endif
#ifndef MT_ASSOC_BARRIER
#define MT_ASSOC_BARRIER(e) (e)
#endif
/* exp(x) for float, about 1 ulp on [-87.3, 88.3] (with FMA); x is clamped to that range first so
   2^n stays a normal float: below it the result is 0, above it 2e38 (never inf).
   Cephes' polynomial on [-ln2/2, ln2/2]; branch-free so loops over it vectorise. */
static inline float mt_expf(float x) {
    const float xin = x;
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.3f ? 88.3f : x;
    /* n = round(x / ln2), then r = x - n ln2 to more bits than a float ln2 has: with FMA
       hardware in two fused steps (Cody-Waite), which -ffast-math must not merge into one (that
       cost up to 60 ulp); without, in one step in double, which leaves nothing to reassociate
       (GCC 12's vectorizer drops a reassociation barrier between two float steps).
       With FMA, n comes from adding the shifter
       1.5 * 2^23 + 127, whose sum keeps n + 127 in its low mantissa bits, 2^n's exponent field
       once shifted into place: no rounding or integer conversion. */
#if defined(__FMA__)
    const float shifter = 12582912.0f + 127.0f;
    const float t = __builtin_fmaf(x, 1.44269504088896341f, shifter);
    const float n = MT_ASSOC_BARRIER(t) - shifter;
    float r = __builtin_fmaf(n, -0.693359375f, x);
    r = __builtin_fmaf(n, 2.12194440e-4f, r);
    uint32_t bits;
    memcpy(&bits, &t, sizeof bits);
    bits <<= 23;
#else
    const float n = __builtin_rintf(x * 1.44269504088896341f);
    const float r = (float)((double)x - (double)n * 0.6931471805599453);
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
#endif
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return xin < -87.3f ? 0.0f : p * scale;
}
/* tanh(x) for float: Eigen's rational approximation on [-7.9, 7.9] (a few ulp), which
   is exact to float precision outside that range once clamped; tiny |x| returns x. */
static inline float mt_tanhf(float x) {
    float c = x < -7.90531110763549805f ? -7.90531110763549805f : x;
    c = c > 7.90531110763549805f ? 7.90531110763549805f : c;
    float x2 = c * c;
    float p = -2.76076847742355e-16f;
    p = p * x2 + 2.00018790482477e-13f;
    p = p * x2 + -8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    p = p * c;
    float q = 1.19825839466702e-06f;
    q = q * x2 + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    float t = p / q;
    return (x < 0.0004f && x > -0.0004f) ? x : t;
}
#endif
