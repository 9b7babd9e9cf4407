"""Compiled Cython kernels of the CPU provider (built from ext/*.pyx)."""
