# cython: language_level=3
"""CPUID and XCR0 of the running CPU, for the runtime ISA dispatch (minitrain/_ext/dispatch.py).

Built for the plain architecture (no -march flags) so it imports on any CPU this package's
platform names.  SANITIZE is the MINITRAIN_SANITIZE list this build was compiled with ("" for
a normal build), so a test can check that a sanitizer run really runs sanitized kernels.
"""
from libc.stdint cimport uint32_t, uint64_t

cdef extern from "cpu_features.h":
    int MT_X86
    int mt_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t* regs)
    uint64_t mt_xcr0()
    const char* MT_SANITIZE

IS_X86 = bool(MT_X86)
SANITIZE = MT_SANITIZE.decode()


def cpuid(uint32_t leaf, uint32_t subleaf=0):
    """(eax, ebx, ecx, edx) of CPUID leaf/subleaf; zeros above the CPU's last leaf or off x86."""
    cdef uint32_t regs[4]
    regs[0] = regs[1] = regs[2] = regs[3] = 0
    mt_cpuid(leaf, subleaf, regs)
    return (regs[0], regs[1], regs[2], regs[3])


def xcr0():
    """XCR0: the register state the OS saves (bit 1 SSE, 2 AVX, 5-7 AVX-512); 0 without OSXSAVE or off x86."""
    return mt_xcr0()
