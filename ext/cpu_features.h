/* Raw CPUID and XCR0 reads for minitrain's runtime ISA dispatch (minitrain/_ext/dispatch.py
   decodes the bits).  Built without -march flags so that it runs on any x86-64 CPU; on other
   machines MT_X86 is 0 and the reads return zeros. */
#ifndef MT_CPU_FEATURES_H
#define MT_CPU_FEATURES_H

#include <stdint.h>

/* The sanitizers this build was compiled with: setup.py defines it from MINITRAIN_SANITIZE. */
#ifndef MT_SANITIZE
#define MT_SANITIZE ""
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define MT_X86 1

/* eax, ebx, ecx, edx of CPUID leaf/subleaf into regs; 0 (regs untouched) above the CPU's last leaf. */
static int mt_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t* regs)
{
    return __get_cpuid_count(leaf, subleaf, &regs[0], &regs[1], &regs[2], &regs[3]);
}

/* XCR0, the register state the OS saves on a context switch; 0 when the OS has not enabled
   XSAVE (CPUID.1:ECX.OSXSAVE[27] clear), where XGETBV itself would fault. */
static uint64_t mt_xcr0(void)
{
    uint32_t regs[4] = {0, 0, 0, 0};
    if (!mt_cpuid(1, 0, regs) || !(regs[2] & (1u << 27)))
        return 0;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#else
#define MT_X86 0

static int mt_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t* regs)
{
    (void)leaf; (void)subleaf; (void)regs;
    return 0;
}

static uint64_t mt_xcr0(void) { return 0; }
#endif

#endif
