"""The hot kernels built for the baseline ISA level (x86-64-v2; on aarch64 the default target with NEON)."""
