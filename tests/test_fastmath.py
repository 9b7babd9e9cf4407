"""ext/fastmath.h's float exp, built into a small C program with and without FMA (the two
ways it computes n and the reduced argument) under the extensions' fast-math flags: its error
against libm's double exp over the whole clamped range, and its edges."""
import pytest

EXP_C = r"""
#include <float.h>
#include <math.h>
#include <stdio.h>
#include "fastmath.h"
int main(void) {
    double worst = 0;
    for (float x = -87.0f; x < 88.0f; x += 0.0007f) {
        const double e = exp((double)x), ulp = ldexp(1.0, ilogb(e) - 23);
        const double err = fabs(mt_expf(x) - e) / ulp;
        worst = err > worst ? err : worst;
    }
    printf("%.3f %g %g %g %g\n", worst, mt_expf(-87.3f), mt_expf(-87.31f), mt_expf(88.3f), mt_expf(1e30f));
    return 0;
}
"""


@pytest.mark.parametrize("fma", ["-mfma", "-mno-fma"])
def test_expf_accuracy_and_edges(fma, run_c):
    out = run_c(EXP_C, ["-O2", "-ffast-math", "-fno-finite-math-only", "-mavx", fma])
    worst, at_low, below_low, at_high, huge = (float(v) for v in out.split())
    assert worst < (1.5 if fma == "-mfma" else 3.0), f"max error {worst} ulp"
    assert at_low >= 1.1754943508222875e-38           # still a normal float
    assert below_low == 0
    assert 1e38 < at_high < 3.5e38 and at_high == huge   # clamped: never inf
