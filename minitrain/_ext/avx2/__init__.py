"""The hot kernels built for x86-64-v3 (AVX2, FMA, BMI2); minitrain._ext.dispatch decides when they run."""
