"""The hot kernels built for x86-64-v4 (AVX-512 F/BW/CD/DQ/VL); minitrain._ext.dispatch decides when they run."""
