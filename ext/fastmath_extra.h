/* Branch-free float erf and log1p for ext/pointwise_activation.pyx: loops over them vectorise
   (libm's erff and log1pf keep a loop scalar, 20-50x slower). */
#ifndef MINITRAIN_FASTMATH_EXTRA_H
#define MINITRAIN_FASTMATH_EXTRA_H

/* erf(x) for float: Eigen's rational approximation x P(x^2) / Q(x^2) on [-4, 4] (about 4 ulp),
   exact to float precision outside that range once clamped. */
static inline float mt_erff(float x) {
    float c = x < -4.0f ? -4.0f : x;
    c = c > 4.0f ? 4.0f : c;
    const float x2 = c * c;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 + -2.10102402082508e-06f;
    p = p * x2 + -5.69250639462346e-05f;
    p = p * x2 + -7.34990630326855e-04f;
    p = p * x2 + -2.95459980854025e-03f;
    p = p * x2 + -1.60960333262415e-02f;
    p = p * c;
    float q = -1.45660718464996e-05f;
    q = q * x2 + -2.13374055278905e-04f;
    q = q * x2 + -1.68282697438203e-03f;
    q = q * x2 + -7.37332916720468e-03f;
    q = q * x2 + -1.42647390514189e-02f;
    return p / q;
}

/* log1p(e) for float e in [0, 1] (softplus's log1p(exp(-|x|))): 2 atanh(s) with s = e / (2 + e)
   in [0, 1/3], summed to s^17, whose next term is below float precision; relative error about
   1 ulp, small e included. */
static inline float mt_log1p_unit(float e) {
    const float s = e / (2.0f + e), s2 = s * s;
    float p = 1.0f / 17.0f;
    p = p * s2 + 1.0f / 15.0f;
    p = p * s2 + 1.0f / 13.0f;
    p = p * s2 + 1.0f / 11.0f;
    p = p * s2 + 1.0f / 9.0f;
    p = p * s2 + 1.0f / 7.0f;
    p = p * s2 + 1.0f / 5.0f;
    p = p * s2 + 1.0f / 3.0f;
    p = p * s2 + 1.0f;
    return 2.0f * s * p;
}
#endif
